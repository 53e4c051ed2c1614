package draclaims_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/ranker/plugins/draclaims"
	"sextant.io/sextant/ranker/plugins/draclaims/dratest"
)

// The prediction, which gives each node's allocator only the slices it can use there,
// picks the devices an allocator over every slice of the cluster picks (what
// DynamicResources runs), on nodes with their own pools, a pool split over two slices,
// a pool whose second slice is missing, and a pool every node sees. The stable
// allocator (no features) walks pools in map order, so two of its runs over the same
// slices may pick different devices: for it only whether the claim fits is compared.
func TestPredictionAllocatesAsOverEverySlice(t *testing.T) {
	n := func(i int64) *int64 { return &i }
	m := &dratest.Manager{Classes: []*resourceapi.DeviceClass{dratest.Class("acc", sextant), dratest.Class("x", other)}}
	for i := range 4 {
		node := fmt.Sprintf("node-%d", i)
		m.Slices = append(m.Slices, dratest.Slice(sextant, node,
			dratest.Device{Name: "acc-0", NUMANode: n(0)}, dratest.Device{Name: "acc-1", NUMANode: n(1)}))
	}
	split := []*resourceapi.ResourceSlice{
		dratest.Slice(other, "node-1", dratest.Device{Name: "x0", PCIBusID: "0000:3b:00.0"}),
		dratest.Slice(other, "node-1", dratest.Device{Name: "x1", PCIBusID: "0000:af:00.0"}),
	}
	split[1].Name += "-2"
	incomplete := dratest.Slice(other, "node-2", dratest.Device{Name: "x0"})
	everywhere := dratest.Slice(other, "cluster", dratest.Device{Name: "x9"})
	everywhere.Spec.NodeName, everywhere.Spec.AllNodes = nil, ptr.To(true)
	for _, s := range append(split, incomplete) {
		s.Spec.Pool.ResourceSliceCount = 2
	}
	m.Slices = append(m.Slices, append(split, incomplete, everywhere)...)
	m.Claims = append(m.Claims,
		dratest.Allocated(dratest.Claim("ns", "held", "acc", 1, false), sextant, "node-0", "acc-0"),
		dratest.Claim("ns", "one", "acc", 1, false), dratest.Claim("ns", "two-x", "x", 2, false))

	for name, a := range map[string]draclaims.Allocator{"stable": allocator(m), "production": production(m)} {
		for _, claim := range []string{"one", "two-x"} {
			c, _ := m.ResourceClaims().Get("ns", claim)
			p, err := a.New(context.Background(), dratest.Pod("ns", "p", claim), nil)
			if err != nil {
				t.Fatal(err)
			}
			st, _ := m.ResourceClaims().GatherAllocatedState()
			whole, err := structured.NewAllocator(context.Background(), a.Features, *st, m.DeviceClasses(), m.Slices, a.CEL)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				node := &v1.Node{}
				node.Name = fmt.Sprintf("node-%d", i)
				got, ok, err := p.Devices(context.Background(), node, m.DeviceClassResolver())
				if err != nil {
					t.Fatal(err)
				}
				var want []structured.DeviceID
				// No solution is (nil, nil) or ErrFailedAllocationOnNode.
				allocs, err := whole.Allocate(context.Background(), node, []*resourceapi.ResourceClaim{c})
				allocated := err == nil && len(allocs) == 1
				if allocated {
					for _, r := range allocs[0].Devices.Results {
						want = append(want, structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
					}
				}
				if ok != allocated || (name == "production" && !slices.Equal(got, want)) {
					t.Errorf("%s allocator, claim %s on %s: predicted %v (ok %v), an allocator over every slice %v (%v)", name, claim, node.Name, got, ok, want, err)
				}
			}
		}
	}
}
