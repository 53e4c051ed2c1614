package draclaims

import (
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

func slice(name, driver, pool string, node string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{}
	s.Name, s.Spec.Driver, s.Spec.Pool.Name = name, driver, pool
	if node != "" {
		s.Spec.NodeName = ptr.To(node)
	} else {
		s.Spec.AllNodes = ptr.To(true)
	}
	return s
}

func names(sl []*resourceapi.ResourceSlice) string {
	var out []string
	for _, s := range sl {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// A node's slices are its own pools whole, including their slices naming other nodes
// (the allocator counts a pool's slices to judge it complete), and every pool any node
// may see; nothing else.
func TestForNode(t *testing.T) {
	counters := slice("counters", "gpu", "a-shared", "a")
	counters.Spec.SharedCounters = []resourceapi.CounterSet{{Name: "mem"}}
	s := group([]*resourceapi.ResourceSlice{
		slice("a-gpu", "gpu", "a", "a"),
		slice("b-gpu", "gpu", "b", "b"),
		slice("ab-1", "nic", "ab", "a"), slice("ab-2", "nic", "ab", "b"),
		slice("net", "net", "cluster", ""),
		counters, slice("a-shared-devs", "gpu", "a-shared", "a"),
	})
	for node, want := range map[string]string{
		"a": "a-gpu,a-shared-devs,ab-1,ab-2,counters,net",
		"b": "ab-1,ab-2,a-shared-devs,b-gpu,counters,net",
		"c": "a-shared-devs,counters,net",
	} {
		wantSorted := strings.Split(want, ",")
		slices.Sort(wantSorted)
		if got := names(s.forNode(node)); got != strings.Join(wantSorted, ",") {
			t.Errorf("node %s: slices %s, want %s", node, got, strings.Join(wantSorted, ","))
		}
	}
	if got := names(s.pools[poolID{"nic", "ab"}]); got != "ab-1,ab-2" {
		t.Errorf("pool nic/ab: %s", got)
	}
}

// The grouping is kept while the lister hands out the same slices, in whatever order,
// and made anew when one of them is replaced, added or removed.
func TestSliceIndexKeepsTheGroupingOfTheSameSlices(t *testing.T) {
	a, b, c := slice("a", "gpu", "a", "a"), slice("b", "gpu", "b", "b"), slice("c", "gpu", "c", "c")
	var x SliceIndex
	first := x.of([]*resourceapi.ResourceSlice{a, b})
	if x.of([]*resourceapi.ResourceSlice{b, a}) != first {
		t.Fatal("the same slices in another order were grouped again")
	}
	bNew := slice("b", "gpu", "b", "a")
	for name, listing := range map[string][]*resourceapi.ResourceSlice{
		"replaced": {a, bNew},
		"added":    {a, b, c},
		"removed":  {a},
	} {
		x.last = first
		got := x.of(listing)
		if got == first {
			t.Errorf("%s: the old grouping was kept", name)
		}
		if names(got.forNode("a")) != names(group(listing).forNode("a")) {
			t.Errorf("%s: node a's slices %s, want %s", name, names(got.forNode("a")), names(group(listing).forNode("a")))
		}
	}
	var none *SliceIndex
	if got := none.of([]*resourceapi.ResourceSlice{a}); names(got.forNode("a")) != "a" {
		t.Errorf("a nil index: node a's slices %s, want a", names(got.forNode("a")))
	}
}
