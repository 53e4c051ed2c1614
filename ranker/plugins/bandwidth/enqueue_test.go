package bandwidth

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/requeue"
)

// kube-scheduler must not watch NodeBandwidth: the heartbeat store is the one watch.
func TestEventsToRegister(t *testing.T) {
	pl := testPlugin(t, testArgs(nil))
	events, err := pl.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if strings.Contains(string(e.Event.Resource), v1alpha1.GroupVersion.Group) {
			t.Errorf("event %s makes kube-scheduler watch a heartbeat kind", e.Event.Resource)
		}
	}
}

// activations records what a Waiting set activates, and what the store and the ledger
// held at that moment.
type activations struct {
	node     string // the node Filter is asked about (default n)
	pods     []string
	passes   []bool // Filter passed node when the pod was activated
	reserved []int
}

// waitingPlugin is testPlugin wired as New wires it: the store tells the plugin of
// reports, and activated pods are recorded.
func waitingPlugin(t *testing.T, reports ...*v1alpha1.NodeBandwidth) (*BandwidthAware, *heartbeat.Store, *activations) {
	t.Helper()
	store := reportStore(reports...)
	pl := newPlugin(testArgs(nil), store, func() time.Time { return now })
	got := &activations{node: "n"}
	pl.waiting = requeue.New(Name, func(_ klog.Logger, pods map[string]*v1.Pod) {
		for _, p := range pods {
			got.pods = append(got.pods, p.Name)
			got.passes = append(got.passes, pl.Filter(context.Background(), nil, p, nodeInfo(got.node)).IsSuccess())
			got.reserved = append(got.reserved, pl.Ledger().Len())
		}
	})
	pl.nodes = func() ([]fwk.NodeInfo, error) { return nodeInfos("n"), nil }
	store.AddListener(heartbeat.Listener{Bandwidth: pl.reportArrived})
	return pl, store, got
}

// reject runs the pod's attempt on node n and its PostFilter, as kube-scheduler would
// after Filter rejected it; before runs between Filter and PostFilter.
func reject(t *testing.T, pl *BandwidthAware, pod *v1.Pod, before func()) {
	t.Helper()
	state := framework.NewCycleState()
	if _, st := pl.PreFilter(context.Background(), state, pod, nodeInfos("n")); !st.IsSuccess() && !st.IsSkip() {
		t.Fatalf("PreFilter: %v", st)
	}
	st := pl.Filter(context.Background(), state, pod, nodeInfo("n"))
	if st.IsSuccess() {
		t.Fatal("setup: Filter passes node n")
	}
	statuses := framework.NewDefaultNodeToStatus()
	statuses.Set("n", st.WithPlugin(Name))
	if before != nil {
		before()
	}
	if _, st := pl.PostFilter(context.Background(), state, pod, statuses); st.Code() != fwk.Unschedulable || len(st.Reasons()) != 0 {
		t.Fatalf("PostFilter = %v, want Unschedulable without a reason (it decides nothing)", st)
	}
}

func TestReportActivatesWaitingPods(t *testing.T) {
	old := report("n", "100M", "1G", now.Add(-10*time.Second))
	needs400M := map[string]string{annotations.IngressRequired: "400M"}
	// A pod that names a network and requires no rate waits for a report listing it.
	onStorage := map[string]string{annotations.BandwidthNetwork: "storage"}
	for _, tc := range []struct {
		name   string
		pod    map[string]string
		report *v1alpha1.NodeBandwidth
		want   bool
	}{
		{"enough now", needs400M, report("n", "500M", "1G", now), true},
		{"still too little", needs400M, report("n", "300M", "1G", now), false},
		// The report's arrival is what counts: however old the agent's clock says it
		// is, it is fresh now.
		{"sampled an hour ago, arriving now", needs400M, report("n", "5G", "5G", now.Add(-time.Hour)), true},
		{"partial", needs400M, partialReport("n", "5G", "5G", now), false},
		{"another node with room", needs400M, report("m", "5G", "5G", now), true},
		{"the network added", onStorage, networks(report("n", "1G", "1G", now), net3{"pod", "1G", "10G"}, net3{"storage", "1G", "25G"}), true},
		{"still without the network", onStorage, networks(report("n", "5G", "5G", now), net3{"pod", "5G", "10G"}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, store, got := waitingPlugin(t, old)
			pod := testPod(tc.pod)
			reject(t, pl, pod, nil)
			if pl.waiting.Len() != 1 {
				t.Fatalf("%d pods waiting after PostFilter, want 1", pl.waiting.Len())
			}
			got.node = tc.report.Name
			store.PutAt(tc.report, now)
			if activated := len(got.pods) == 1; activated != tc.want {
				t.Fatalf("activated %v, want %v", got.pods, tc.want)
			}
			if tc.want && !got.passes[0] {
				t.Error("the pod was activated before the store held the report that admits it")
			}
			if tc.want && pl.waiting.Len() != 0 {
				t.Error("an activated pod is still waiting")
			}
		})
	}
}

// A running pod on n holds a reservation the new report covers: the ledger releases it
// before the waiting pod is activated, so the retry is not refused for it.
func TestReportReleasesReservationsBeforeActivating(t *testing.T) {
	pl, store, got := waitingPlugin(t, report("n", "500M", "1G", now.Add(-10*time.Second)))
	// It started 65s ago: the old report's 60s window began before it ran, the new one's after.
	held := testPod(map[string]string{annotations.IngressRequired: "300M"})
	pl.Ledger().ObservePod(runningPod(held, "n", now.Add(-65*time.Second)))
	if pl.Ledger().Len() != 1 {
		t.Fatal("setup: the running pod holds no reservation")
	}
	pod := testPod(map[string]string{annotations.IngressRequired: "400M"})
	reject(t, pl, pod, nil)
	store.PutAt(report("n", "500M", "1G", now), now)
	if len(got.pods) != 1 || got.reserved[0] != 0 || !got.passes[0] {
		t.Fatalf("activated %v with %v reservations, Filter passing %v; want the pod, 0, true", got.pods, got.reserved, got.passes)
	}
}

// A report that arrives while the attempt runs (after Filter, before PostFilter) finds
// the pod not yet waiting: PostFilter brings it back at once.
func TestPostFilterActivatesOnReportArrivedMeanwhile(t *testing.T) {
	pl, store, got := waitingPlugin(t, report("n", "100M", "1G", now.Add(-10*time.Second)))
	pod := testPod(map[string]string{annotations.IngressRequired: "400M"})
	reject(t, pl, pod, func() { store.PutAt(report("n", "500M", "1G", now), now.Add(time.Second)) })
	if len(got.pods) != 1 || !got.passes[0] {
		t.Fatalf("activated %v (Filter passing %v), want the pod at once", got.pods, got.passes)
	}
	// One that does not admit it leaves it waiting.
	pl2, store2, got2 := waitingPlugin(t, report("n", "100M", "1G", now.Add(-10*time.Second)))
	reject(t, pl2, pod, func() { store2.PutAt(report("n", "200M", "1G", now), now.Add(time.Second)) })
	if len(got2.pods) != 0 || pl2.waiting.Len() != 1 {
		t.Fatalf("activated %v, %d waiting; want none activated, 1 waiting", got2.pods, pl2.waiting.Len())
	}
}

// A new version the relist after a watch break delivers during the attempt is dated by
// its status write, before the attempt began; it still arrived meanwhile, so PostFilter
// brings the pod back rather than leave it for the next report.
func TestPostFilterActivatesOnBackDatedReportArrivedMeanwhile(t *testing.T) {
	written := func(rv, rem string, at time.Time) *v1alpha1.NodeBandwidth {
		r := report("n", rem, "1G", at)
		r.ResourceVersion = rv
		r.ManagedFields = []metav1.ManagedFieldsEntry{{Subresource: "status", Time: &metav1.Time{Time: at}}}
		return r
	}
	pl, store, got := waitingPlugin(t)
	// The node's previous report came promptly, 10s before the attempt.
	store.PutAt(written("1", "100M", now.Add(-10*time.Second)), now.Add(-10*time.Second))
	pod := testPod(map[string]string{annotations.IngressRequired: "400M"})
	reject(t, pl, pod, func() {
		// Written 5s before the attempt, delivered 1s into it: dated at its write.
		store.PutAt(written("2", "500M", now.Add(-5*time.Second)), now.Add(time.Second))
		if b := store.Node("n").Bandwidth(); !b.Received.Before(now) {
			t.Fatalf("setup: report received %v, want back-dated before the attempt at %v", b.Received, now)
		}
	})
	if len(got.pods) != 1 || !got.passes[0] {
		t.Fatalf("activated %v (Filter passing %v), want the pod at once", got.pods, got.passes)
	}
}

// A pod with malformed annotations waits for its own update (an event kube-scheduler
// watches), never for a report.
func TestMalformedPodNotActivatedByReports(t *testing.T) {
	pl, store, got := waitingPlugin(t, report("n", "100M", "1G", now.Add(-10*time.Second)))
	pod := testPod(map[string]string{annotations.IngressRequired: "x"})
	state := framework.NewCycleState()
	_, st := pl.PreFilter(context.Background(), state, pod, nodeInfos("n"))
	statuses := framework.NewDefaultNodeToStatus()
	statuses.SetAbsentNodesStatus(st.WithPlugin(Name))
	pl.PostFilter(context.Background(), state, pod, statuses)
	store.PutAt(report("n", "5G", "5G", now), now)
	if len(got.pods) != 0 {
		t.Errorf("activated %v for a report", got.pods)
	}
}

// A pod another plugin rejected does not wait on this one.
func TestPostFilterIgnoresOtherPluginsRejections(t *testing.T) {
	pl, _, _ := waitingPlugin(t)
	pod := testPod(map[string]string{annotations.IngressRequired: "400M"})
	statuses := framework.NewDefaultNodeToStatus()
	statuses.Set("n", fwk.NewStatus(fwk.Unschedulable, "no").WithPlugin("NodeResourcesFit"))
	pl.PostFilter(context.Background(), framework.NewCycleState(), pod, statuses)
	if pl.waiting.Len() != 0 {
		t.Error("a pod NodeResourcesFit rejected waits for BandwidthAware's reports")
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

// partialReport is a report of an agent that has measured 5s since it started.
func partialReport(node, ingressRemaining, egressRemaining string, sampled time.Time) *v1alpha1.NodeBandwidth {
	r := report(node, ingressRemaining, egressRemaining, sampled)
	r.Status.Window.Duration = 5 * time.Second
	return r
}

// Under the strict best-fit window, a report whose remaining is above the window still
// brings the waiting pod back: reservations the report does not show yet can put the
// node inside the window, where Filter passes it.
func TestReportActivatesPodsOutsideTheStrictWindow(t *testing.T) {
	store := reportStore(report("n", "10G", "10G", now.Add(-10*time.Second)))
	pl := newPlugin(testArgs(func(a *Args) { a.BestFitWindow = WindowStrict }), store, func() time.Time { return now })
	activated := 0
	pl.waiting = requeue.New(Name, func(_ klog.Logger, pods map[string]*v1.Pod) { activated += len(pods) })
	pl.nodes = func() ([]fwk.NodeInfo, error) { return nodeInfos("n"), nil }
	store.AddListener(heartbeat.Listener{Bandwidth: pl.reportArrived})

	// Window 3G-5G: 10G left is 6G from expected, more than expected - required.
	x := testPod(map[string]string{annotations.IngressRequired: "3G", annotations.IngressExpected: "4G"})
	reject(t, pl, x, nil)
	// Another pod takes 6G on n: 4G left, x's expected.
	y := testPod(map[string]string{annotations.IngressRequired: "6G"})
	pl.Ledger().Reserve(y, "n", mustParse(t, y))
	state := framework.NewCycleState()
	if _, st := pl.PreFilter(context.Background(), state, x, nodeInfos("n")); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	if st := pl.Filter(context.Background(), state, x, nodeInfo("n")); !st.IsSuccess() {
		t.Fatalf("setup: Filter(x, n) = %v, want success beside y's reservation", st)
	}
	// y is not running yet: n's next report still shows 10G.
	store.PutAt(report("n", "10G", "10G", now), now)
	if activated != 1 || pl.waiting.Len() != 0 {
		t.Errorf("after n's report: %d activated, %d waiting; want x back, as Filter passes it", activated, pl.waiting.Len())
	}
	// A node under the floor still does not bring it back.
	z := testPod(map[string]string{annotations.IngressRequired: "11G", annotations.IngressExpected: "12G"})
	reject(t, pl, z, nil)
	store.PutAt(report("n", "10G", "10G", now.Add(time.Second)), now)
	if pl.waiting.Len() != 1 {
		t.Errorf("z, which requires more than n reports, left waiting: %d waiting, want 1", pl.waiting.Len())
	}
}
