package numa

import (
	"context"
	"testing"

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

// A pod Filter rejected waits in PostFilter and comes back on the next NodeTopology
// change, or at once when one came during its attempt; the store holds the change first.
func TestTopologyChangeActivatesWaitingPods(t *testing.T) {
	for _, meanwhile := range []bool{false, true} {
		store := heartbeat.NewFromObjects(uniform("n", 2, 2, 4*gi), &v1alpha1.NodeBandwidth{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
		pl := NewWith(store, nil)
		var activated []string
		var sawBigger []bool
		pl.waiting = requeue.New(Name, func(_ klog.Logger, pods map[string]*v1.Pod) {
			for _, p := range pods {
				activated = append(activated, p.Name)
				sawBigger = append(sawBigger, len(store.Topology("n").Status.NUMANodes[0].CPUs) == 8)
			}
		})
		pl.snapshot = func() ([]fwk.NodeInfo, error) { return []fwk.NodeInfo{nodeInfo("n")}, nil }
		store.AddListener(heartbeat.Listener{Topology: pl.waiting.ActivateAll})

		p := pod("big", "6", gi, map[string]string{annotations.NUMAPolicy: string(annotations.PolicySingleNUMANode)})
		state := framework.NewCycleState()
		if _, st := pl.PreFilter(context.Background(), state, p, []fwk.NodeInfo{nodeInfo("n")}); !st.IsSuccess() {
			t.Fatalf("PreFilter: %v", st)
		}
		st := pl.Filter(context.Background(), state, p, nodeInfo("n"))
		if st.IsSuccess() {
			t.Fatal("setup: Filter passes")
		}
		statuses := framework.NewDefaultNodeToStatus()
		statuses.Set("n", st.WithPlugin(Name))
		if meanwhile {
			store.Put(uniform("n", 2, 8, 4*gi))
		}
		if _, st := pl.PostFilter(context.Background(), state, p, statuses); st.Code() != fwk.Unschedulable || st.Message() != "" {
			t.Fatalf("PostFilter = %v, want Unschedulable without a message", st)
		}
		if !meanwhile {
			if len(activated) != 0 || pl.waiting.Len() != 1 {
				t.Fatalf("activated %v with %d waiting before any change", activated, pl.waiting.Len())
			}
			store.Put(uniform("n", 2, 8, 4*gi))
		}
		if len(activated) != 1 || !sawBigger[0] || pl.waiting.Len() != 0 {
			t.Errorf("meanwhile=%v: activated %v (store held the change: %v), %d waiting; want [big], true, 0",
				meanwhile, activated, sawBigger, pl.waiting.Len())
		}
	}
}
