package bandwidth

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
)

func TestEventsToRegister(t *testing.T) {
	pl := testPlugin(t, testArgs(nil))
	events, err := pl.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var sawReport bool
	for _, e := range events {
		if e.Event.Resource == fwk.EventResource("nodebandwidths."+v1alpha1.GroupVersion.Version+"."+v1alpha1.GroupVersion.Group) {
			sawReport = true
		}
	}
	if !sawReport {
		t.Error("NodeBandwidth events must requeue pods (resource <plural>.<version>.<group>)")
	}
}

func TestQueueingHintReport(t *testing.T) {
	logger := klog.Background()
	pl := testPlugin(t, testArgs(nil))
	pod := testPod(map[string]string{annotations.IngressRequired: "400M"})
	toUnstructured := func(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: m}
	}
	// What kube-scheduler's own informer hands the hint (see heartbeat.EventTransform).
	_, trim, _ := heartbeat.EventTransform(heartbeat.BandwidthEvent)
	trimmed := func(t *testing.T, obj runtime.Object) any {
		out, err := trim(toUnstructured(t, obj))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		obj  any
		want fwk.QueueingHint
	}{
		{"enough now", toUnstructured(t, report("n", "500M", "1G", now)), fwk.Queue},
		{"still too little", toUnstructured(t, report("n", "300M", "1G", now)), fwk.QueueSkip},
		// The event is the report's arrival: however old the agent's clock says it is,
		// it is fresh now.
		{"sampled an hour ago, arriving now", toUnstructured(t, report("n", "5G", "5G", now.Add(-time.Hour))), fwk.Queue},
		{"partial", toUnstructured(t, partialReport("n", "5G", "5G", now)), fwk.QueueSkip},
		{"typed object", report("n", "500M", "1G", now), fwk.Queue},
		{"trimmed, enough now", trimmed(t, report("n", "500M", "1G", now)), fwk.Queue},
		{"trimmed, still too little", trimmed(t, report("n", "300M", "1G", now)), fwk.QueueSkip},
		{"trimmed, partial", trimmed(t, partialReport("n", "5G", "5G", now)), fwk.QueueSkip},
		{"trimmed, rejected", trimmed(t, rejectedReport("n")), fwk.QueueSkip},
	} {
		got, err := pl.isSchedulableAfterReport(logger, pod, nil, tc.obj)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if got, err := pl.isSchedulableAfterReport(logger, pod, nil, "junk"); err == nil || got != fwk.Queue {
		t.Errorf("junk: got %v, %v; want Queue and an error", got, err)
	}
	// A pod placed earlier still holds 300M on n in the ledger when the report that
	// covers its traffic arrives: the ledger's own handler may not have released it yet,
	// so the hint must not count it, or the pending pod would wait for the flush.
	held := testPod(map[string]string{annotations.IngressRequired: "300M"})
	pl.ledger.Reserve(held, "n", annotations.BandwidthRequest{Ingress: annotations.Direction{Required: 300e6, HasRequired: true}})
	if got, _ := pl.isSchedulableAfterReport(logger, pod, nil, report("n", "500M", "1G", now)); got != fwk.Queue {
		t.Errorf("a report with room for the pod before the ledger caught up with it: got %v, want Queue", got)
	}
	if in, _ := pl.ledger.Reserved("n"); in != 300e6 {
		t.Errorf("the hint changed the ledger: %d reserved, want 300M", in)
	}
	malformed := testPod(map[string]string{annotations.IngressRequired: "x"})
	if got, _ := pl.isSchedulableAfterReport(logger, malformed, nil, report("n", "5G", "5G", now)); got != fwk.QueueSkip {
		t.Error("a report cannot fix malformed annotations")
	}
}

func TestQueueingHintPods(t *testing.T) {
	logger := klog.Background()
	pod := testPod(map[string]string{annotations.IngressRequired: "x"})
	fixed := pod.DeepCopy()
	fixed.Annotations = map[string]string{annotations.IngressRequired: "400M"}
	relabeled := pod.DeepCopy()
	relabeled.Labels = map[string]string{"a": "b"}
	if got, _ := isSchedulableAfterPodUpdated(logger, pod, pod, fixed); got != fwk.Queue {
		t.Error("fixing the annotation should requeue")
	}
	if got, _ := isSchedulableAfterPodUpdated(logger, pod, pod, relabeled); got != fwk.QueueSkip {
		t.Error("an unrelated update should not requeue")
	}
	other := testPod(map[string]string{annotations.IngressRequired: "1M"})
	if got, _ := isSchedulableAfterPodUpdated(logger, pod, other, other); got != fwk.QueueSkip {
		t.Error("another pod's update should not requeue")
	}

	bound := testPod(map[string]string{annotations.IngressRequired: "1M"})
	bound.Spec.NodeName = "n"
	if got, _ := isSchedulableAfterPodDeleted(logger, pod, bound, nil); got != fwk.Queue {
		t.Error("deleting a bound bandwidth pod frees its reservation")
	}
	plain := testPod(nil)
	plain.Spec.NodeName = "n"
	if got, _ := isSchedulableAfterPodDeleted(logger, pod, plain, nil); got != fwk.QueueSkip {
		t.Error("deleting a pod without bandwidth annotations changes nothing for this plugin")
	}
}

func TestSignPod(t *testing.T) {
	pl := testPlugin(t, testArgs(nil))
	a := testPod(map[string]string{annotations.IngressRequired: "1M", "other": "1"})
	b := testPod(map[string]string{annotations.IngressRequired: "1M", "other": "2"})
	c := testPod(map[string]string{annotations.IngressRequired: "2M"})
	sign := func(p *v1.Pod) string {
		f, st := pl.SignPod(context.Background(), p)
		if !st.IsSuccess() || len(f) != 1 || f[0].Key != signerName {
			t.Fatalf("SignPod: %v %v", f, st)
		}
		out, err := json.Marshal(f[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if sign(a) != sign(b) {
		t.Error("pods with equal bandwidth annotations must sign alike")
	}
	if sign(a) == sign(c) {
		t.Error("pods with different bandwidth annotations must sign differently")
	}
}

// The pod a report requeues is retried at once, possibly before the heartbeat store's
// own informer delivered that report: the hint brings the store and the ledger up to
// it, so that Filter in that attempt passes the node.
func TestQueueingHintAdvancesStore(t *testing.T) {
	logger := klog.Background()
	old := report("n", "100M", "1G", now.Add(-10*time.Second))
	pl := testPlugin(t, testArgs(nil), old)
	pod := testPod(map[string]string{annotations.IngressRequired: "400M"})
	// A pod on n that started 65s ago: the old report's 60s window began before it
	// ran, the new one's after.
	held := testPod(map[string]string{annotations.IngressRequired: "300M"})
	pl.Ledger().ObservePod(runningPod(held, "n", now.Add(-65*time.Second)))
	if pl.Ledger().Len() != 1 {
		t.Fatal("setup: the running pod holds no reservation")
	}
	ni := nodeInfo("n")
	if st := pl.Filter(context.Background(), nil, pod, ni); st.IsSuccess() {
		t.Fatal("setup: the node passes on the old report")
	}
	fresh := report("n", "500M", "1G", now)
	if got, err := pl.isSchedulableAfterReport(logger, pod, old, fresh); err != nil || got != fwk.Queue {
		t.Fatalf("hint: %v, %v; want Queue", got, err)
	}
	if st := pl.Filter(context.Background(), nil, pod, ni); !st.IsSuccess() {
		t.Errorf("the attempt after the hint fails on the node: %v", st)
	}
	if pl.Ledger().Len() != 0 {
		t.Error("the report covers the running pod, but the hint left its reservation")
	}
	// An older report arriving late through the hint does not undo a newer one.
	pl.isSchedulableAfterReport(logger, pod, nil, report("n", "900M", "1G", now.Add(-5*time.Second)))
	if got := pl.reports.Node("n").Bandwidth().Network(annotations.PodNetwork).IngressRemaining; got != 500e6 {
		t.Errorf("remaining %d after a late older report, want the newer 500M", got)
	}
}

// partialReport is a report of an agent that has measured 5s since it started.
func partialReport(node, ingressRemaining, egressRemaining string, sampled time.Time) *v1alpha1.NodeBandwidth {
	r := report(node, ingressRemaining, egressRemaining, sampled)
	r.Status.Window.Duration = 5 * time.Second
	return r
}

// rejectedReport is a report with plenty of room that the heartbeat store rejects
// (remaining above capacity).
func rejectedReport(node string) *v1alpha1.NodeBandwidth {
	return report(node, "50G", "50G", now)
}
