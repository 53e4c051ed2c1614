package bandwidth

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
)

// podInfo wraps a pod for AddPod and RemovePod.
func podInfo(t *testing.T, pod *v1.Pod) fwk.PodInfo {
	t.Helper()
	pi, err := framework.NewPodInfo(pod)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

// Preemption's dry run takes lower-priority pods off a node through RemovePod and puts
// the reprieved ones back through AddPod; nominated pods are added through AddPod
// before Filter. Filter must see the node as those calls leave it, on the pod's
// network only, and a rejection preemption can resolve must say Unschedulable.
func TestPreemptionSeesTheNodeWithoutItsVictims(t *testing.T) {
	const node = "n"
	low := func(ann map[string]string) *v1.Pod {
		p := boundPod(node, -time.Minute, ann, "sextant")
		return p
	}
	preemptor := map[string]string{annotations.EgressRequired: "100M"}
	for _, c := range []struct {
		name string
		// setup puts the pods on the node and returns the one the dry run removes.
		setup  func(t *testing.T, pl *BandwidthAware) *v1.Pod
		report string // remaining each way
		// guarantee: the node enforces up to this ("" does not).
		guarantee string
		// wantBefore and wantAfter: Filter's code before and after RemovePod.
		wantBefore, wantAfter fwk.Code
	}{
		{
			name: "a victim's reservation", report: "200M",
			setup: func(t *testing.T, pl *BandwidthAware) *v1.Pod {
				v := low(map[string]string{annotations.EgressRequired: "150M"})
				pl.Ledger().ObservePod(v)
				return v
			},
			wantBefore: fwk.Unschedulable, wantAfter: fwk.Success,
		},
		{
			name: "a covered victim's required rate", report: "50M",
			setup: func(t *testing.T, pl *BandwidthAware) *v1.Pod {
				v := runningPod(low(map[string]string{annotations.EgressRequired: "150M"}), node, now.Add(-time.Hour))
				pl.Ledger().ObservePod(v)
				if pl.Ledger().Len() != 0 {
					t.Fatal("the long-running victim holds a reservation, want it covered")
				}
				return v
			},
			wantBefore: fwk.Unschedulable, wantAfter: fwk.Success,
		},
		{
			name: "a victim's guarantee", report: "10G", guarantee: "500M",
			setup: func(t *testing.T, pl *BandwidthAware) *v1.Pod {
				v := runningPod(low(map[string]string{annotations.EgressRequired: "450M"}), node, now.Add(-time.Hour))
				pl.Ledger().ObservePod(v)
				return v
			},
			wantBefore: fwk.Unschedulable, wantAfter: fwk.Success,
		},
		{
			name: "a victim on another network frees nothing", report: "50M",
			setup: func(t *testing.T, pl *BandwidthAware) *v1.Pod {
				v := low(map[string]string{annotations.EgressRequired: "150M", annotations.BandwidthNetwork: "storage"})
				pl.Ledger().ObservePod(v)
				return v
			},
			wantBefore: fwk.Unschedulable, wantAfter: fwk.Unschedulable,
		},
		{
			name: "a victim without annotations frees nothing", report: "50M",
			setup: func(t *testing.T, pl *BandwidthAware) *v1.Pod {
				return low(nil)
			},
			wantBefore: fwk.Unschedulable, wantAfter: fwk.Unschedulable,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := report(node, c.report, c.report, now.Add(-time.Second))
			if c.guarantee != "" {
				r = enforcingReport(node, c.guarantee)
			}
			pl := testPlugin(t, testArgs(nil), r)
			victim := c.setup(t, pl)
			pod := testPod(preemptor)
			state := framework.NewCycleState()
			if _, st := pl.PreFilter(context.Background(), state, pod, nil); !st.IsSuccess() {
				t.Fatal(st)
			}
			ni := nodeInfo(node)
			if got := pl.Filter(context.Background(), state, pod, ni).Code(); got != c.wantBefore {
				t.Fatalf("before the dry run: %v, want %v", got, c.wantBefore)
			}
			dry := state.Clone()
			if st := pl.PreFilterExtensions().RemovePod(context.Background(), dry, pod, podInfo(t, victim), ni); !st.IsSuccess() {
				t.Fatal(st)
			}
			if got := pl.Filter(context.Background(), dry, pod, ni).Code(); got != c.wantAfter {
				t.Errorf("without the victim: %v, want %v", got, c.wantAfter)
			}
			if got := pl.Filter(context.Background(), state, pod, ni).Code(); got != c.wantBefore {
				t.Errorf("the cycle's own state changed with the dry run's: %v, want %v", got, c.wantBefore)
			}
			if got := pl.Filter(context.Background(), dry, pod, nodeInfo("other")).Code(); got != fwk.UnschedulableAndUnresolvable {
				t.Errorf("the dry run on %s changed another node: %v", node, got)
			}
			if st := pl.PreFilterExtensions().AddPod(context.Background(), dry, pod, podInfo(t, victim), ni); !st.IsSuccess() {
				t.Fatal(st)
			}
			if got := pl.Filter(context.Background(), dry, pod, ni).Code(); got != c.wantBefore {
				t.Errorf("with the victim reprieved: %v, want %v", got, c.wantBefore)
			}
		})
	}

	t.Run("a nominated pod takes its required rate", func(t *testing.T) {
		pl := testPlugin(t, testArgs(nil), report(node, "200M", "200M", now.Add(-time.Second)))
		pod := testPod(preemptor)
		state := framework.NewCycleState()
		pl.PreFilter(context.Background(), state, pod, nil)
		nominated := testPod(map[string]string{annotations.EgressRequired: "150M"})
		if st := pl.PreFilterExtensions().AddPod(context.Background(), state, pod, podInfo(t, nominated), nodeInfo(node)); !st.IsSuccess() {
			t.Fatal(st)
		}
		if got := pl.Filter(context.Background(), state, pod, nodeInfo(node)).Code(); got != fwk.Unschedulable {
			t.Errorf("100M beside a nominated 150M on 200M: %v, want Unschedulable", got)
		}
	})

	t.Run("unresolvable rejections stay unresolvable", func(t *testing.T) {
		pl := testPlugin(t, testArgs(nil), report(node, "", "", now.Add(-time.Second)))
		if got := pl.Filter(context.Background(), nil, testPod(preemptor), nodeInfo(node)).Code(); got != fwk.UnschedulableAndUnresolvable {
			t.Errorf("capacity unknown: %v, want UnschedulableAndUnresolvable", got)
		}
	})
}

// A preemption victim whose traffic the node's reports count leaves its required rates
// as a credit on the node when it is deleted, so the preemptor fits at once rather than
// after a window, when kube-scheduler would have preempted more; a report measured
// entirely after it went ends the credit. A pod deleted for another reason leaves none.
func TestPreemptionVictimLeavesRoom(t *testing.T) {
	const node = "n"
	for _, c := range []struct {
		name      string
		preempted bool
		wantFits  bool
	}{{"preempted", true, true}, {"deleted by its owner", false, false}} {
		t.Run(c.name, func(t *testing.T) {
			pl := testPlugin(t, testArgs(nil), report(node, "50M", "50M", now.Add(-time.Second)))
			victim := runningPod(boundPod(node, -time.Hour, map[string]string{annotations.EgressRequired: "150M"}, "sextant"), node, now.Add(-time.Hour))
			pl.Ledger().ObservePod(victim)
			if c.preempted {
				victim.Status.Conditions = append(victim.Status.Conditions, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue,
					Reason: v1.PodReasonPreemptionByScheduler, LastTransitionTime: metav1.NewTime(now)})
			}
			pl.Ledger().podHandler().OnDelete(victim)
			pod := testPod(map[string]string{annotations.EgressRequired: "100M"})
			if got := pl.Filter(context.Background(), nil, pod, nodeInfo(node)).IsSuccess(); got != c.wantFits {
				t.Fatalf("100M pod after the victim went: fits %v, want %v", got, c.wantFits)
			}
			pl.Ledger().ObserveReport(report(node, "200M", "200M", now.Add(2*time.Minute)))
			if pl.Ledger().Len() != 0 {
				t.Errorf("%d reservations after a report measured after the victim went, want 0", pl.Ledger().Len())
			}
			if in, eg := pl.Ledger().Reserved(node); in != 0 || eg != 0 {
				t.Errorf("reserved %d/%d, want nothing", in, eg)
			}
		})
	}
}
