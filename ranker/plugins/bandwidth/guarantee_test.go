package bandwidth

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/binder"
)

// enforcingReport is a report of a node whose pod network has 10G remaining each way and
// whose agent keeps guarantees up to guarantee each way; "" for a node that does not
// enforce.
func enforcingReport(node, guarantee string) *v1alpha1.NodeBandwidth {
	r := report(node, "10G", "10G", now.Add(-time.Second))
	c, rem := resource.MustParse("10G"), resource.MustParse("10G")
	dir := v1alpha1.DirectionBandwidth{Capacity: &c, Remaining: &rem}
	nw := v1alpha1.NetworkBandwidth{Name: annotations.PodNetwork, Interfaces: []string{"eth0"}, Bandwidth: v1alpha1.Bandwidth{Ingress: dir, Egress: dir}}
	if guarantee != "" {
		g := resource.MustParse(guarantee)
		nw.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionGuaranteesEnforced, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonShaped}}
		nw.Guarantees = &v1alpha1.Guarantees{Ingress: v1alpha1.GuaranteedDirection{Capacity: &g}, Egress: v1alpha1.GuaranteedDirection{Capacity: &g}}
	}
	r.Status.Networks = []v1alpha1.NetworkBandwidth{nw}
	return r
}

// boundPod is a pod bound to node at the given offset from now, as the informer shows
// it (the API server's PodScheduled condition dates the binding).
func boundPod(node string, at time.Duration, ann map[string]string, scheduler string) *v1.Pod {
	p := testPod(ann)
	p.Spec.NodeName, p.Spec.SchedulerName = node, scheduler
	p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(at))}}
	return p
}

// On a node that enforces, the required rates of its pods take the guarantees, idle or
// not, in the order they were bound, as the agent admits them: a pod that does not fit
// beside them is filtered out though the node measures its bandwidth free; a pod the
// node would not keep (bound past the guarantees by another scheduler) takes nothing.
func TestFilterKeepsToWhatTheNodeGuarantees(t *testing.T) {
	pl := testPlugin(t, testArgs(nil), enforcingReport("enforcing", "900M"), enforcingReport("measuring", ""))
	pl.Ledger().SetOurs(func(p *v1.Pod) bool { return p.Spec.SchedulerName == "sextant" })
	first := boundPod("enforcing", -3*time.Minute, map[string]string{annotations.EgressRequired: "600M"}, "sextant")
	foreign := boundPod("enforcing", -2*time.Minute, map[string]string{annotations.EgressRequired: "1P"}, "other")
	second := boundPod("enforcing", -time.Minute, map[string]string{annotations.EgressRequired: "250M"}, "sextant")
	for _, p := range []*v1.Pod{first, foreign, second} {
		pl.Ledger().ObservePod(p)
	}
	if in, eg := pl.Ledger().GuaranteedOn("enforcing", annotations.PodNetwork); in != 0 || eg != 850e6 {
		t.Fatalf("guaranteed %d/%d, want 0/850M: the 1P pod does not fit, the one after it does", in, eg)
	}

	tooBig := testPod(map[string]string{annotations.EgressRequired: "100M"})
	c := schedule(t, pl, tooBig, []string{"enforcing", "measuring"}, true)
	st := c.filtered["enforcing"]
	if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "could not guarantee the pod's required egress bandwidth") {
		t.Fatalf("a 100M pod on a node with 50M of guarantees left: %v", st)
	}
	if c.chosen != "measuring" {
		t.Errorf("chosen %q, want the node that only measures", c.chosen)
	}
	fits := testPod(map[string]string{annotations.EgressRequired: "50M", annotations.IngressRequired: "800M"})
	if c := schedule(t, pl, fits, []string{"enforcing"}, true); c.chosen != "enforcing" {
		t.Fatalf("a 50M pod beside 850M of 900M: chosen %q, filtered %v", c.chosen, c.filtered)
	}
	if in, eg := pl.Ledger().GuaranteedOn("enforcing", annotations.PodNetwork); in != 800e6 || eg != 900e6 {
		t.Errorf("after Reserve: guaranteed %d/%d, want 800M/900M", in, eg)
	}

	// The first pod ends: its guarantee goes with it, whatever the reports say.
	pl.Ledger().ForgetPod(first.UID)
	if c := schedule(t, pl, tooBig, []string{"enforcing"}, false); c.chosen != "enforcing" {
		t.Errorf("the 100M pod once 600M went: chosen %q, filtered %v", c.chosen, c.filtered)
	}
	// Another pod that fits now is placed, but a Binding that fails gives its guarantee up.
	late := testPod(map[string]string{annotations.EgressRequired: "600M"})
	pl.Ledger().Reserve(late, "enforcing", mustParse(t, late))
	pl.Ledger().Unreserve(late.UID, "enforcing")
	if _, eg := pl.Ledger().GuaranteedOn("enforcing", annotations.PodNetwork); eg != 300e6 {
		t.Errorf("after Unreserve: egress guaranteed %d, want 300M", eg)
	}
}

// Reserve decides whether the placement is guaranteed, puts the decision on the pod's
// Binding and counts it.
func TestReserveSaysWhetherThePlacementIsGuaranteed(t *testing.T) {
	pl := testPlugin(t, testArgs(nil), enforcingReport("enforcing", "900M"), enforcingReport("measuring", ""))
	for _, c := range []struct {
		node, want string
	}{{"enforcing", "true"}, {"measuring", "false"}} {
		pod := testPod(map[string]string{annotations.IngressRequired: "100M"})
		state := framework.NewCycleState()
		binder.Open(state)
		before, _ := testutil.GetCounterMetricValue(placementsTotal.WithLabelValues(c.want))
		if _, st := pl.PreFilter(context.Background(), state, pod, nil); !st.IsSuccess() {
			t.Fatal(st)
		}
		if st := pl.Reserve(context.Background(), state, pod, c.node); !st.IsSuccess() {
			t.Fatal(st)
		}
		if got := binder.Staged(state)[annotations.BandwidthGuaranteed]; got != c.want {
			t.Errorf("on %s: staged %s=%q, want %q", c.node, annotations.BandwidthGuaranteed, got, c.want)
		}
		if after, _ := testutil.GetCounterMetricValue(placementsTotal.WithLabelValues(c.want)); after != before+1 {
			t.Errorf("on %s: placements_total{guaranteed=%s} went %v -> %v", c.node, c.want, before, after)
		}
		pl.Unreserve(context.Background(), state, pod, c.node)
		if _, ok := binder.Staged(state)[annotations.BandwidthGuaranteed]; ok {
			t.Errorf("on %s: the decision stayed staged after Unreserve", c.node)
		}
	}
	// A pod that only expects bandwidth is not placed on a guarantee: no decision.
	pod := testPod(map[string]string{annotations.IngressExpected: "100M"})
	state := framework.NewCycleState()
	binder.Open(state)
	pl.PreFilter(context.Background(), state, pod, nil)
	pl.Reserve(context.Background(), state, pod, "enforcing")
	if _, ok := binder.Staged(state)[annotations.BandwidthGuaranteed]; ok {
		t.Error("a pod without a required rate got a guarantee decision")
	}
}
