package numa

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/heartbeat"
)

// BenchmarkFilterScore is one node's Filter and Score for a pod on an 8-NUMA-node node
// with 40 annotated pods, as repeated for the same pod and unchanged node: both are
// answered from the node's cached free capacity and remembered choice. The choice's own
// cost, paid once per pod and node, is BenchmarkBestChoice.
func BenchmarkFilterScore(b *testing.B) {
	var pods []*v1.Pod
	for i := range 40 {
		pods = append(pods, on("n", pod(fmt.Sprintf("p%d", i), "1", gi, map[string]string{annotations.NUMANodes: fmt.Sprint(i % 8)})))
	}
	ni := nodeInfo("n", pods...)
	pl := NewWith(heartbeat.NewFromObjects(uniform("n", 8, 8, 32*gi)), nil)
	p := pod("new", "12", 40*gi, nil) // needs two NUMA nodes
	ctx := context.Background()
	state := newState()
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

// BenchmarkBestChoice is the choice itself on an 8-NUMA-node node, computed once per
// node and pod in a cycle (Filter; Score, DeviceAware and Reserve reuse it).
func BenchmarkBestChoice(b *testing.B) {
	topo := uniform("n", 8, 8, 32*gi)
	var pods []*v1.Pod
	for i := range 40 {
		pods = append(pods, on("n", pod(fmt.Sprintf("p%d", i), "1", gi, map[string]string{annotations.NUMANodes: fmt.Sprint(i % 8)})))
	}
	free := FreeCapacity(topo, nil, nodeInfo("n", pods...).GetPods(), nil)
	for _, bc := range []struct {
		name string
		req  Request
	}{
		{"one NUMA node", Request{MilliCPU: 2000, Memory: 4 * gi}},
		{"two NUMA nodes", Request{MilliCPU: 12000, Memory: 40 * gi}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := BestChoice(topo, free, bc.req); !ok {
					b.Fatal("no fit")
				}
			}
		})
	}
}

// BenchmarkFreeCapacity is one node's free capacity, computed once per node and NodeInfo
// generation, on a full node (110 pods, the kubelet's default maximum): all of them
// pinned, and half of them pods the ranker did not place, which are spread over all
// NUMA nodes. The ratio of the two is what counting unpinned pods costs.
func BenchmarkFreeCapacity(b *testing.B) {
	topo := uniform("n", 8, 8, 32*gi)
	node := &v1.Node{Status: v1.NodeStatus{
		Capacity:    v1.ResourceList{v1.ResourceCPU: mustQuantity("64"), v1.ResourceMemory: mustQuantity("256Gi")},
		Allocatable: v1.ResourceList{v1.ResourceCPU: mustQuantity("62"), v1.ResourceMemory: mustQuantity("250Gi")},
	}}
	for _, unpinned := range []int{0, 55} {
		var pods []*v1.Pod
		for i := range 110 {
			ann := map[string]string{annotations.NUMANodes: fmt.Sprint(i % 8)}
			if i < unpinned {
				ann = nil
			}
			pods = append(pods, on("n", pod(fmt.Sprintf("p%d", i), "100m", gi/8, ann)))
		}
		infos := nodeInfo("n", pods...).GetPods()
		b.Run(fmt.Sprintf("unpinned=%d", unpinned), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				FreeCapacity(topo, node, infos, nil)
			}
		})
	}
}
