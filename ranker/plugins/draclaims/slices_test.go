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
	s.Spec.NodeName = ptr.To(node)
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

// The grouping is kept while the lister hands out the same slices, in whatever order,
// and made anew when one of them is replaced, added or removed.
func TestSliceIndexKeepsTheGroupingOfTheSameSlices(t *testing.T) {
	a, b, c := slice("a", "gpu", "a", "a"), slice("b", "gpu", "b", "b"), slice("c", "gpu", "c", "c")
	var x SliceIndex
	x.byPool([]*resourceapi.ResourceSlice{a, b})
	first := x.last
	x.byPool([]*resourceapi.ResourceSlice{b, a})
	if x.last != first {
		t.Fatal("the same slices in another order were grouped again")
	}
	bMoved := slice("b", "gpu", "a", "b")
	for name, tc := range map[string]struct {
		listing []*resourceapi.ResourceSlice
		pool    string
		want    string
	}{
		"replaced": {[]*resourceapi.ResourceSlice{a, bMoved}, "a", "a,b"},
		"added":    {[]*resourceapi.ResourceSlice{a, b, c}, "c", "c"},
		"removed":  {[]*resourceapi.ResourceSlice{a}, "b", ""},
	} {
		x.last = first
		got := x.byPool(tc.listing)
		if x.last == first {
			t.Errorf("%s: the old grouping was kept", name)
		}
		if names(got[poolID{"gpu", tc.pool}]) != tc.want {
			t.Errorf("%s: pool %s holds %s, want %s", name, tc.pool, names(got[poolID{"gpu", tc.pool}]), tc.want)
		}
	}
	var none *SliceIndex
	if got := none.byPool([]*resourceapi.ResourceSlice{a}); names(got[poolID{"gpu", "a"}]) != "a" {
		t.Errorf("a nil index: pool a holds %s, want a", names(got[poolID{"gpu", "a"}]))
	}
}
