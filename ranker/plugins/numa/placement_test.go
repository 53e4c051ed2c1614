package numa

import (
	"math"
	"math/rand"
	"slices"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/numahint"
)

func TestPodRequestHonorsInitContainers(t *testing.T) {
	p := pod("p", "1", 2*gi, nil)
	p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
		v1.ResourceCPU: mustQuantity("3"),
	}}}}
	got := PodRequest(p)
	if got.MilliCPU != 3000 || got.Memory != 2*gi {
		t.Errorf("PodRequest = %+v, want 3000m CPU (init container max) and 2Gi", got)
	}
}

func TestBestChoice(t *testing.T) {
	// Four NUMA nodes in two sockets: 0-1 close (12), across sockets far (32).
	dist := [][]int32{{10, 12, 32, 32}, {12, 10, 32, 32}, {32, 32, 10, 12}, {32, 32, 12, 10}}
	twoSockets := topology("n",
		numaSpec{cpus: 2, mem: 4 * gi, dist: dist[0]}, numaSpec{cpus: 2, mem: 4 * gi, dist: dist[1]},
		numaSpec{cpus: 2, mem: 4 * gi, dist: dist[2]}, numaSpec{cpus: 2, mem: 4 * gi, dist: dist[3]})
	for _, tc := range []struct {
		name    string
		free    []Free
		req     Request
		want    []int32
		wantFit bool
	}{
		{name: "one NUMA node fits", req: Request{MilliCPU: 2000, Memory: 4 * gi}, want: []int32{0}, wantFit: true},
		{name: "two needed, the close pair wins", req: Request{MilliCPU: 3000, Memory: 4 * gi}, want: []int32{0, 1}, wantFit: true},
		{name: "memory decides the count", req: Request{MilliCPU: 1000, Memory: 6 * gi}, want: []int32{0, 1}, wantFit: true},
		{
			name: "busy NUMA node 0: 1 alone is enough",
			free: []Free{{ID: 0, MilliCPU: 0, Memory: 0}, {ID: 1, MilliCPU: 2000, Memory: 4 * gi}, {ID: 2, MilliCPU: 2000, Memory: 4 * gi}, {ID: 3, MilliCPU: 2000, Memory: 4 * gi}},
			req:  Request{MilliCPU: 2000, Memory: 4 * gi}, want: []int32{1}, wantFit: true,
		},
		{
			name: "busy NUMA node 0: pair 2-3 beats 1-2 on distance",
			free: []Free{{ID: 0, MilliCPU: 0, Memory: 0}, {ID: 1, MilliCPU: 2000, Memory: 4 * gi}, {ID: 2, MilliCPU: 2000, Memory: 4 * gi}, {ID: 3, MilliCPU: 2000, Memory: 4 * gi}},
			req:  Request{MilliCPU: 3000, Memory: 4 * gi}, want: []int32{2, 3}, wantFit: true,
		},
		{name: "everything", req: Request{MilliCPU: 8000, Memory: 16 * gi}, want: []int32{0, 1, 2, 3}, wantFit: true},
		{name: "more than the node has", req: Request{MilliCPU: 8001, Memory: 0}, wantFit: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			free := tc.free
			if free == nil {
				free = FreeCapacity(twoSockets, nil, nil, nil)
			}
			got, ok := BestChoice(twoSockets, free, tc.req)
			if ok != tc.wantFit || !slices.Equal(got.Nodes, tc.want) {
				t.Errorf("BestChoice = %v, %v; want %v, %v", got.Nodes, ok, tc.want, tc.wantFit)
			}
		})
	}
}

// TestBestChoiceIDs covers the two ways a multi-NUMA choice gets its IDs: shared lists
// for IDs below sharedSetIDs, which must not allocate (Filter makes such a choice on
// every node a large pod is checked on), and fresh ones above.
func TestBestChoiceIDs(t *testing.T) {
	low := []Free{{ID: 1, MilliCPU: 1000, Memory: gi}, {ID: 3, MilliCPU: 1000, Memory: gi}, {ID: 6, MilliCPU: 1000, Memory: gi}}
	high := []Free{{ID: 7, MilliCPU: 1000, Memory: gi}, {ID: 8, MilliCPU: 1000, Memory: gi}, {ID: 12, MilliCPU: 1000, Memory: gi}}
	// No distances: every pair ties, and the first in ID order wins.
	nt := &v1alpha1.NodeTopology{}
	for _, tc := range []struct {
		name string
		free []Free
		want []int32
	}{
		{"shared", low, []int32{1, 3}},
		{"beyond the shared IDs", high, []int32{7, 8}},
		{"an ID listed twice", []Free{{ID: 2, MilliCPU: 1000, Memory: gi}, {ID: 2, MilliCPU: 1000, Memory: gi}}, []int32{2, 2}},
	} {
		got, ok := bestChoice(tc.free, Request{MilliCPU: 2000, Memory: gi}, lazyDistances{topo: nt})
		if !ok || !slices.Equal(got.Nodes, tc.want) {
			t.Errorf("%s: bestChoice = %v, %v; want %v", tc.name, got.Nodes, ok, tc.want)
		}
	}
	dist := lazyDistances{topo: nt, cache: new(atomic.Pointer[[][]int64])}
	bestChoice(low, Request{MilliCPU: 2000, Memory: gi}, dist)
	if n := testing.AllocsPerRun(100, func() { bestChoice(low, Request{MilliCPU: 2000, Memory: gi}, dist) }); n != 0 {
		t.Errorf("a two-NUMA-node choice of low IDs allocates %v times, want 0", n)
	}
}

func TestBestChoiceGreedyBeyondCap(t *testing.T) {
	nt := uniform("n", maxExhaustiveNUMANodes+4, 1, gi)
	got, ok := BestChoice(nt, FreeCapacity(nt, nil, nil, nil), Request{MilliCPU: 3000, Memory: gi})
	if !ok || len(got.Nodes) != 3 {
		t.Errorf("BestChoice on %d NUMA nodes = %v, %v; want 3 nodes", maxExhaustiveNUMANodes+4, got.Nodes, ok)
	}
}

// Beyond the exhaustive search's cap BestChoice is greedy by free CPU, but one NUMA
// node that fits alone still wins: here the NUMA node with the most CPU lacks the
// memory, and greedy would have added a second.
func TestBestChoiceSingleBeyondCap(t *testing.T) {
	nt := uniform("n", maxExhaustiveNUMANodes+4, 1, 8*gi)
	nt.Status.NUMANodes[0].CPUs = []int32{0, 100, 101, 102}
	nt.Status.NUMANodes[0].MemoryBytes = gi
	got, ok := BestChoice(nt, FreeCapacity(nt, nil, nil, nil), Request{MilliCPU: 1000, Memory: 4 * gi})
	if !ok || !slices.Equal(got.Nodes, []int32{1}) {
		t.Errorf("BestChoice = %v, %v; want NUMA node [1]", got.Nodes, ok)
	}
}

// Filter decides from whether one NUMA node, else all together, hold the pod; that must
// be what BestChoice (which Score and Reserve use) says, for either policy, on random
// capacities of 1 to 16 NUMA nodes (greedy beyond 12).
func TestFitAgreesWithBestChoice(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := range 20000 {
		n := 1 + rng.Intn(16)
		nt := uniform("n", n, 1, gi)
		free := make([]Free, n)
		for j := range free {
			free[j] = Free{ID: int32(j), MilliCPU: rng.Int63n(17) * 1000, Memory: rng.Int63n(65) * gi}
		}
		req := Request{MilliCPU: rng.Int63n(40) * 1000, Memory: rng.Int63n(120) * gi}
		ch, ok := BestChoice(nt, free, req)
		for _, policy := range []annotations.NUMAPolicyValue{annotations.PolicyNone, annotations.PolicySingleNUMANode} {
			reason, uneven := fit(free, req, policy)
			var wantReason string
			switch {
			case !ok:
				wantReason = reasonNoFit
			case len(ch.Nodes) > 1 && policy == annotations.PolicySingleNUMANode:
				wantReason = reasonSingleNUMANode
			}
			wantUneven := ok && len(ch.Nodes) > 1 && policy == annotations.PolicyNone
			if reason != wantReason || uneven != wantUneven {
				t.Fatalf("case %d, policy %q, free %v, request %v: fit = %q, uneven %v; BestChoice %v, %v wants %q, uneven %v",
					i, policy, free, req, reason, uneven, ch.Nodes, ok, wantReason, wantUneven)
			}
		}
	}
}

func TestFreeCapacity(t *testing.T) {
	// Node 0: 4 CPUs, 8Gi; node 1: 4 CPUs, 8Gi; node 2: 8 CPUs, memoryless.
	topo := topology("n", numaSpec{cpus: 4, mem: 8 * gi}, numaSpec{cpus: 4, mem: 8 * gi}, numaSpec{cpus: 8})
	annotated := func(name, cpu string, mem int64, nodes string) *v1.Pod {
		return on("n", pod(name, cpu, mem, map[string]string{annotations.NUMANodes: nodes}))
	}
	finished := on("n", pod("done", "16", 16*gi, nil))
	finished.Status.Phase = v1.PodSucceeded
	kubelet := &v1.Node{Status: v1.NodeStatus{
		Capacity:    v1.ResourceList{v1.ResourceCPU: resource.MustParse("16"), v1.ResourceMemory: *resource.NewQuantity(16*gi, resource.BinarySI)},
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("14"), v1.ResourceMemory: *resource.NewQuantity(14*gi, resource.BinarySI)},
	}}
	full := []Free{{ID: 0, MilliCPU: 4000, Memory: 8 * gi}, {ID: 1, MilliCPU: 4000, Memory: 8 * gi}, {ID: 2, MilliCPU: 8000, Memory: 0}}
	for _, tc := range []struct {
		name     string
		node     *v1.Node
		pods     []*v1.Pod
		reserved map[string]reservation
		want     []Free
	}{
		{name: "empty node", want: full},
		{name: "one NUMA node", pods: []*v1.Pod{annotated("a", "2", 4*gi, "0")},
			want: []Free{{ID: 0, MilliCPU: 2000, Memory: 4 * gi}, {ID: 1, MilliCPU: 4000, Memory: 8 * gi}, {ID: 2, MilliCPU: 8000, Memory: 0}}},
		{name: "two NUMA nodes, split evenly", pods: []*v1.Pod{annotated("b", "2", 2*gi, "0,1")},
			want: []Free{{ID: 0, MilliCPU: 3000, Memory: 7 * gi}, {ID: 1, MilliCPU: 3000, Memory: 7 * gi}, {ID: 2, MilliCPU: 8000, Memory: 0}}},
		{name: "unannotated pod spread by CPUs and by memory", pods: []*v1.Pod{on("n", pod("d", "8", 8*gi, nil))},
			// CPU 8 over 4:4:8 CPUs; memory 8Gi over 8Gi:8Gi:0.
			want: []Free{{ID: 0, MilliCPU: 2000, Memory: 4 * gi}, {ID: 1, MilliCPU: 2000, Memory: 4 * gi}, {ID: 2, MilliCPU: 4000, Memory: 0}}},
		{name: "malformed annotation counts as unpinned", pods: []*v1.Pod{annotated("c", "8", 8*gi, "zero")},
			want: []Free{{ID: 0, MilliCPU: 2000, Memory: 4 * gi}, {ID: 1, MilliCPU: 2000, Memory: 4 * gi}, {ID: 2, MilliCPU: 4000, Memory: 0}}},
		{name: "unknown NUMA node counts as unpinned", pods: []*v1.Pod{annotated("e", "8", 8*gi, "1,7")},
			want: []Free{{ID: 0, MilliCPU: 2000, Memory: 4 * gi}, {ID: 1, MilliCPU: 2000, Memory: 4 * gi}, {ID: 2, MilliCPU: 4000, Memory: 0}}},
		{name: "reserved pod counts where it was reserved", pods: []*v1.Pod{on("n", pod("f", "500m", gi, nil))},
			reserved: map[string]reservation{"f": {nodes: []int32{1}, req: Request{MilliCPU: 500, Memory: gi}}},
			want:     []Free{{ID: 0, MilliCPU: 4000, Memory: 8 * gi}, {ID: 1, MilliCPU: 3500, Memory: 7 * gi}, {ID: 2, MilliCPU: 8000, Memory: 0}}},
		{name: "finished pods count nothing", pods: []*v1.Pod{finished}, want: full},
		{name: "kubelet reserved is spread", node: kubelet,
			// 2 CPUs over 4:4:8; 2Gi over the two nodes with memory.
			want: []Free{{ID: 0, MilliCPU: 3500, Memory: 7 * gi}, {ID: 1, MilliCPU: 3500, Memory: 7 * gi}, {ID: 2, MilliCPU: 7000, Memory: 0}}},
		{name: "uneven shares round up", pods: []*v1.Pod{on("n", pod("g", "1", 3, nil))},
			want: []Free{{ID: 0, MilliCPU: 3750, Memory: 8*gi - 2}, {ID: 1, MilliCPU: 3750, Memory: 8*gi - 2}, {ID: 2, MilliCPU: 7500, Memory: 0}}},
		{name: "floored at zero", pods: []*v1.Pod{annotated("h", "64", 64*gi, "0"), on("n", pod("i", "1", gi, nil))},
			want: []Free{{ID: 0, MilliCPU: 0, Memory: 0}, {ID: 1, MilliCPU: 3750, Memory: 8*gi - gi/2}, {ID: 2, MilliCPU: 7500, Memory: 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reserved := func(p *v1.Pod) ([]int32, Request, bool) {
				r, ok := tc.reserved[p.Name]
				return r.nodes, r.req, ok
			}
			got := FreeCapacity(topo, tc.node, framework.NewNodeInfo(tc.pods...).GetPods(), reserved)
			if !slices.Equal(got, tc.want) {
				t.Errorf("FreeCapacity = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestProportion(t *testing.T) {
	for _, tc := range []struct{ total, part, whole, want int64 }{
		{8, 4, 16, 2},
		{1, 1, 3, 1}, // rounded up
		{0, 1, 2, 0},
		{5, 0, 2, 0},
		{5, 1, 0, 0},
		{1 << 50, 1 << 50, 1 << 51, 1 << 49}, // the product overflows int64
		{math.MaxInt64, 3, 3, math.MaxInt64},
	} {
		if got := proportion(tc.total, tc.part, tc.whole); got != tc.want {
			t.Errorf("proportion(%d, %d, %d) = %d, want %d", tc.total, tc.part, tc.whole, got, tc.want)
		}
	}
}

// TestChooseMemo: on a node of few NUMA nodes a multi-NUMA choice is searched again
// each time, without allocating; beyond memoFromNUMANodes the first search is kept and
// answers the same request again.
func TestChooseMemo(t *testing.T) {
	for _, tc := range []struct {
		numaNodes int
		wantMemo  bool
	}{
		{numaNodes: 2, wantMemo: false},
		{numaNodes: memoFromNUMANodes, wantMemo: false},
		{numaNodes: memoFromNUMANodes + 2, wantMemo: true},
	} {
		topo := uniform("n", tc.numaNodes, 2, 4*gi)
		nf := new(nodeFree)
		*nf = newNodeFree(FreeCapacity(topo, nil, nil, nil), numahint.Counts{})
		req := Request{MilliCPU: 3000, Memory: 4 * gi} // two NUMA nodes
		first, ok := nf.choose(topo, req, annotations.PolicyNone)
		if !ok || len(first.Nodes) != 2 {
			t.Fatalf("%d NUMA nodes: choose = %v, %v; want two NUMA nodes", tc.numaNodes, first.Nodes, ok)
		}
		if got := nf.last.Load() != nil; got != tc.wantMemo {
			t.Errorf("%d NUMA nodes: memo kept %v, want %v", tc.numaNodes, got, tc.wantMemo)
		}
		again, _ := nf.choose(topo, req, annotations.PolicyNone)
		if !slices.Equal(again.Nodes, first.Nodes) || again.Distance != first.Distance {
			t.Errorf("%d NUMA nodes: second choice %+v, first %+v", tc.numaNodes, again, first)
		}
		if !tc.wantMemo {
			if n := testing.AllocsPerRun(100, func() { nf.choose(topo, req, annotations.PolicyNone) }); n != 0 {
				t.Errorf("%d NUMA nodes: choose allocates %v times, want 0", tc.numaNodes, n)
			}
		}
	}
}

// TestGreedyChoiceCountsDevices: beyond maxExhaustiveNUMANodes the greedy choice still
// takes the NUMA nodes the devices are on, closest first.
func TestGreedyChoiceCountsDevices(t *testing.T) {
	topo := uniform("n", maxExhaustiveNUMANodes+4, 2, 4*gi)
	free := FreeCapacity(topo, nil, nil, nil)
	free[3].Devices[0], free[9].Devices[0], free[14].Devices[0] = 1, 2, 1
	// 14 is close to 9, 3 is not.
	topo.Status.NUMANodes[9].Distances[14], topo.Status.NUMANodes[14].Distances[9] = 11, 11
	req := Request{MilliCPU: 1000, Memory: gi, Devices: numahint.Counts{3}}
	got, ok := BestChoice(topo, free, req)
	if !ok || annotations.FormatNUMANodes(got.Nodes) != "9,14" {
		t.Fatalf("BestChoice = %v, %v; want NUMA nodes 9,14 (three GPUs, the close pair)", got.Nodes, ok)
	}
	if _, ok := BestChoice(topo, free, Request{Devices: numahint.Counts{5}}); ok {
		t.Error("BestChoice found a set for more GPUs than the node has")
	}
}

// TestMemorylessNUMANode: a NUMA node without memory contributes its CPUs to a set in
// which another NUMA node gives the memory, and is a set of its own only for a pod that
// asks for no memory (docs/numa.md, "NUMA nodes without memory").
func TestMemorylessNUMANode(t *testing.T) {
	topo := topology("n", numaSpec{cpus: 2, mem: 8 * gi, dist: []int32{10, 20}}, numaSpec{cpus: 2, dist: []int32{20, 10}})
	busy := nodeInfo("n", on("n", pod("busy", "2", 0, map[string]string{annotations.NUMANodes: "0"})))
	for _, tc := range []struct {
		name string
		ni   *framework.NodeInfo
		req  Request
		want string
	}{
		{name: "memory and CPUs of both", ni: nodeInfo("n"), req: Request{MilliCPU: 3000, Memory: gi}, want: "0,1"},
		{name: "memory only from the node that has it", ni: nodeInfo("n"), req: Request{MilliCPU: 1000, Memory: gi}, want: "0"},
		{name: "CPUs alone from the memoryless node", ni: busy, req: Request{MilliCPU: 1000}, want: "1"},
		{name: "memory from node 0 although its CPUs are taken", ni: busy, req: Request{MilliCPU: 1000, Memory: gi}, want: "0,1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			free := FreeCapacity(topo, nil, tc.ni.GetPods(), nil)
			got, ok := BestChoice(topo, free, tc.req)
			if !ok || annotations.FormatNUMANodes(got.Nodes) != tc.want {
				t.Errorf("BestChoice = %v, %v; want %s", got.Nodes, ok, tc.want)
			}
		})
	}
}
