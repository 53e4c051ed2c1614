package bandwidth

import (
	"context"
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
)

// staticQuotas are quotas by namespace.
type staticQuotas map[string][]*v1alpha1.BandwidthQuota

func (s staticQuotas) Of(ns string) []*v1alpha1.BandwidthQuota { return s[ns] }
func (s staticQuotas) Synced() bool                            { return true }

// The ranker places no pod past its namespace's BandwidthQuota, counting the pods it
// placed (and those bound by others) that have not finished: so the quota holds where
// two pods were admitted at once or the webhook was down. Other namespaces are not
// affected, and a pod that finishes gives its share back.
func TestQuotaCapsWhatANamespacePlaces(t *testing.T) {
	pl := testPlugin(t, testArgs(nil), report("n", "10G", "10G", now.Add(-time.Second)))
	pl.quotas = staticQuotas{"team-a": {{ObjectMeta: metav1.ObjectMeta{Name: "team-a-bw", Namespace: "team-a"},
		Spec: v1alpha1.BandwidthQuotaSpec{Hard: []v1alpha1.NetworkQuota{{Network: "pod", Egress: "500M"}}}}}}
	inNamespace := func(ns, required string) *v1.Pod {
		p := testPod(map[string]string{annotations.EgressRequired: required})
		p.Namespace = ns
		return p
	}
	preFilter := func(p *v1.Pod) *fwk.Status {
		_, st := pl.PreFilter(context.Background(), framework.NewCycleState(), p, nil)
		return st
	}
	first := inNamespace("team-a", "300M")
	if st := preFilter(first); !st.IsSuccess() {
		t.Fatalf("300M of a 500M quota: %v", st)
	}
	pl.Ledger().Reserve(first, "n", mustParse(t, first))
	if st := preFilter(first); !st.IsSuccess() {
		t.Errorf("the placed pod tried again is counted twice: %v", st)
	}
	second := inNamespace("team-a", "250M")
	st := preFilter(second)
	if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), `BandwidthQuota "team-a-bw"`) ||
		!strings.Contains(st.Message(), "550M (300M used + 250M this pod)") {
		t.Errorf("250M beside 300M under 500M: %v, want UnschedulableAndUnresolvable naming the quota and the figures", st)
	}
	if st := preFilter(inNamespace("team-b", "5G")); !st.IsSuccess() {
		t.Errorf("another namespace's pod: %v", st)
	}

	bound := first.DeepCopy()
	bound.Spec.NodeName = "n"
	bound.Status.Phase = v1.PodSucceeded
	pl.Ledger().ObservePod(bound)
	if st := preFilter(second); !st.IsSuccess() {
		t.Errorf("after the first pod finished: %v", st)
	}
	if u := pl.Ledger().NamespaceUsage("team-a", ""); len(u) != 0 {
		t.Errorf("usage %v after every pod finished, want none", u)
	}
}

// A pod waiting for bandwidth is tried again when a bound bandwidth pod finishes or
// stops running, which may release what it held.
func TestFinishedPodRequeues(t *testing.T) {
	waiting := testPod(map[string]string{annotations.EgressRequired: "100M"})
	done := boundPod("n", -time.Minute, map[string]string{annotations.EgressRequired: "100M"}, "sextant")
	done.Status.Phase = v1.PodRunning
	finished := done.DeepCopy()
	finished.Status.Phase = v1.PodSucceeded
	if hint, _ := isSchedulableAfterPodUpdated(klog.Background(), waiting, done, finished); hint != fwk.Queue {
		t.Errorf("a bound bandwidth pod finishing: %v, want Queue", hint)
	}
	if hint, _ := isSchedulableAfterPodUpdated(klog.Background(), waiting, done, done.DeepCopy()); hint != fwk.QueueSkip {
		t.Errorf("a bound bandwidth pod's status update: %v, want QueueSkip", hint)
	}
	running := runningPod(done, "n", now.Add(-time.Minute))
	crashed := running.DeepCopy()
	crashed.Status.ContainerStatuses[0].State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	if hint, _ := isSchedulableAfterPodUpdated(klog.Background(), waiting, running, crashed); hint != fwk.Queue {
		t.Errorf("a bound bandwidth pod that stopped running: %v, want Queue", hint)
	}
}
