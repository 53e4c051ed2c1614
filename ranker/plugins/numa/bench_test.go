package numa

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// BenchmarkFilterScore is one node's Filter and Score for a pod on an 8-NUMA-node node
// with 40 annotated pods, the per-node cost sextant adds to a scheduling cycle.
func BenchmarkFilterScore(b *testing.B) {
	var pods []*v1.Pod
	for i := range 40 {
		pods = append(pods, on("n", pod(fmt.Sprintf("p%d", i), "1", gi, map[string]string{NodesAnnotation: fmt.Sprint(i % 8)})))
	}
	ni := nodeInfo("n", pods...)
	pl := NewWith(topoStore{uniform("n", 8, 8, 32*gi)}, nil, nil)
	p := pod("new", "12", 40*gi, nil) // needs two NUMA nodes
	ctx := context.Background()
	state := framework.NewCycleState()
	pl.PreFilter(ctx, state, p, nil)
	b.ReportAllocs()
	for b.Loop() {
		if st := pl.Filter(ctx, state, p, ni); !st.IsSuccess() {
			b.Fatal(st)
		}
		if _, st := pl.Score(ctx, state, p, ni); !st.IsSuccess() {
			b.Fatal(st)
		}
	}
}
