package numa

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/numahint"
)

// The framework runs Filter and Score for many nodes at once while earlier pods'
// binding cycles Reserve and Unreserve; run under -race.
func TestConcurrentFilterAndReserve(t *testing.T) {
	var infos []*framework.NodeInfo
	var topos []*v1alpha1.NodeTopology
	for i := range 32 {
		name := fmt.Sprintf("node-%d", i)
		infos = append(infos, nodeInfo(name))
		topos = append(topos, uniform(name, 4, 2, 4*gi))
	}
	pl, _ := newPlugin(t, infos, topos...)
	ctx := context.Background()
	p := pod("p", "3", 4*gi, nil)
	state := newState()
	pl.PreFilter(ctx, state, p, nil)
	var wg sync.WaitGroup
	for _, ni := range infos {
		wg.Go(func() {
			if st := pl.Filter(ctx, state, p, ni); !st.IsSuccess() {
				t.Errorf("Filter(%s): %v", ni.Node().Name, st)
			}
			if _, st := pl.Score(ctx, state, p, ni); !st.IsSuccess() {
				t.Errorf("Score(%s): %v", ni.Node().Name, st)
			}
		})
	}
	for i := range 32 {
		wg.Go(func() {
			other := pod(fmt.Sprintf("other-%d", i), "1", gi, nil)
			other.UID = types.UID(other.Name)
			s := newState()
			pl.PreFilter(ctx, s, other, nil)
			node := fmt.Sprintf("node-%d", i)
			if st := pl.Reserve(ctx, s, other, node); !st.IsSuccess() {
				t.Errorf("Reserve: %v", st)
			}
			pl.Unreserve(ctx, s, other, node)
		})
	}
	wg.Wait()
	for _, ni := range infos {
		if nodes, ok := numahint.Chosen(state, ni); !ok || len(nodes) != 2 {
			t.Errorf("%s: chosen %v, want two NUMA nodes", ni.Node().Name, nodes)
		}
	}
}
