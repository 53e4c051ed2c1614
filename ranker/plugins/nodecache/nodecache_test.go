package nodecache

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
)

func topology(name string) *v1alpha1.NodeTopology {
	return &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func TestGetComputesOncePerGenerationAndSource(t *testing.T) {
	store := heartbeat.NewFromObjects(topology("n1"), topology("n2"))
	c := New[*v1alpha1.NodeTopology, int](heartbeat.SlotNUMAFree)
	calls := 0
	compute := func(v int) func() int { return func() int { calls++; return v } }
	a, b := topology("n1"), topology("n1") // equal content, different objects

	steps := []struct {
		name       string
		node       string
		generation int64
		source     *v1alpha1.NodeTopology
		compute    int
		want       int
		wantCalls  int
	}{
		{"first sight computes", "n1", 1, a, 10, 10, 1},
		{"same pair is a hit", "n1", 1, a, 99, 10, 1},
		{"new generation (a pod came or went) recomputes", "n1", 2, a, 20, 20, 2},
		{"new heartbeat object recomputes", "n1", 2, b, 30, 30, 3},
		{"another node is its own entry", "n2", 2, b, 40, 40, 4},
		{"the first node still hits", "n1", 2, b, 99, 30, 4},
		{"an older generation (a transient clone) recomputes", "n1", 1, b, 50, 50, 5},
	}
	for _, s := range steps {
		if got := *c.Get(store.Node(s.node), s.generation, s.source, compute(s.compute)); got != s.want || calls != s.wantCalls {
			t.Errorf("%s: got %d after %d computations, want %d after %d", s.name, got, calls, s.want, s.wantCalls)
		}
	}
}

// Two plugin instances (two profiles) share a Store and so a slot: neither may answer
// from the other's value, which was computed with the other's reservations.
func TestCachesSharingASlotDoNotMix(t *testing.T) {
	store := heartbeat.NewFromObjects(topology("n1"))
	n := store.Node("n1")
	src := n.Topology()
	c1 := New[*v1alpha1.NodeTopology, int](heartbeat.SlotNUMAFree)
	c2 := New[*v1alpha1.NodeTopology, int](heartbeat.SlotNUMAFree)
	if got := *c1.Get(n, 1, src, func() int { return 1 }); got != 1 {
		t.Fatalf("c1 first: %d", got)
	}
	if got := *c2.Get(n, 1, src, func() int { return 2 }); got != 2 {
		t.Errorf("c2 read c1's value: got %d, want its own 2", got)
	}
	if got := *c1.Get(n, 1, src, func() int { return 3 }); got != 3 {
		t.Errorf("c1 after c2 took the slot: got %d, want a recomputed 3", got)
	}
}

// A node whose heartbeat objects went and came back gets nothing computed from the old
// objects, whether its record was kept for readers still holding it or made anew.
func TestValueGoesWithTheRecord(t *testing.T) {
	old := topology("n1")
	store := heartbeat.NewFromObjects(old)
	c := New[*v1alpha1.NodeTopology, int](heartbeat.SlotNUMAFree)
	c.Get(store.Node("n1"), 1, old, func() int { return 1 })
	store.Delete(old)
	if store.Node("n1").Topology() != nil {
		t.Fatal("the deleted topology is still visible")
	}
	fresh := topology("n1")
	store.Put(fresh)
	calls := 0
	if got := *c.Get(store.Node("n1"), 1, fresh, func() int { calls++; return 2 }); got != 2 || calls != 1 {
		t.Errorf("after the node's topology was replaced: got %d after %d computations, want 2 after 1", got, calls)
	}
}
