package draclaims_test

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/draclaims"
	"sextant.io/sextant/ranker/plugins/draclaims/dratest"
)

const (
	sextant = "sextant.io"
	other   = "pci.example.com"
)

// node has two NUMA nodes, two of sextant's accelerators on each (numaNode attribute),
// and two devices of a driver that publishes only pciBusID, one per NUMA node.
func manager() *dratest.Manager {
	n := func(i int64) *int64 { return &i }
	return &dratest.Manager{
		Slices: []*resourceapi.ResourceSlice{
			dratest.Slice(sextant, "node",
				dratest.Device{Name: "acc-a", NUMANode: n(0)}, dratest.Device{Name: "acc-b", NUMANode: n(0)},
				dratest.Device{Name: "acc-c", NUMANode: n(1)}, dratest.Device{Name: "acc-d", NUMANode: n(1)}),
			dratest.Slice(other, "node",
				dratest.Device{Name: "x0", PCIBusID: "0000:3b:00.0"}, dratest.Device{Name: "x1", PCIBusID: "0000:af:00.0"},
				dratest.Device{Name: "x2"}),
		},
		Classes: []*resourceapi.DeviceClass{dratest.Class("acc", sextant), dratest.Class("x", other)},
	}
}

func topology() *v1alpha1.NodeTopology {
	t := &v1alpha1.NodeTopology{}
	t.Status.PCIDevices = []v1alpha1.PCIDevice{
		{Address: "0000:3b:00.0", NUMANode: ptr.To[int32](0)},
		{Address: "0000:af:00.0", NUMANode: ptr.To[int32](1)},
	}
	return t
}

func allocator(m *dratest.Manager) draclaims.Allocator {
	return draclaims.Allocator{Manager: m, CEL: cel.NewCache(10, cel.Features{})}
}

func node() *v1.Node {
	n := &v1.Node{}
	n.Name = "node"
	return n
}

func TestPredictAndPlace(t *testing.T) {
	for _, tc := range []struct {
		name        string
		claims      func(m *dratest.Manager) []string
		wantNUMA    []int32
		wantUnknown int
		wantOK      bool
	}{
		{"two accelerators, first fit on NUMA node 0", func(m *dratest.Manager) []string {
			m.Claims = append(m.Claims, dratest.Claim("ns", "c", "acc", 2, false))
			return []string{"c"}
		}, []int32{0}, 0, true},
		{"one of NUMA node 0 taken: first fit spreads", func(m *dratest.Manager) []string {
			m.Claims = append(m.Claims, dratest.Allocated(dratest.Claim("ns", "held", "acc", 1, false), sextant, "node", "acc-a"),
				dratest.Claim("ns", "c", "acc", 2, false))
			return []string{"c"}
		}, []int32{0, 1}, 0, true},
		{"one of NUMA node 0 taken: a numaNode constraint keeps them together", func(m *dratest.Manager) []string {
			m.Claims = append(m.Claims, dratest.Allocated(dratest.Claim("ns", "held", "acc", 1, false), sextant, "node", "acc-a"),
				dratest.Claim("ns", "c", "acc", 2, true))
			return []string{"c"}
		}, []int32{1}, 0, true},
		{"a pciBusID-only driver is placed by the NodeTopology", func(m *dratest.Manager) []string {
			m.Claims = append(m.Claims, dratest.Allocated(dratest.Claim("ns", "held", "x", 1, false), other, "node", "x0"),
				dratest.Claim("ns", "c", "x", 1, false))
			return []string{"c"}
		}, []int32{1}, 0, true},
		{"a device without either attribute is unknown", func(m *dratest.Manager) []string {
			m.Claims = append(m.Claims, dratest.Claim("ns", "c", "x", 3, false))
			return []string{"c"}
		}, []int32{0, 1}, 1, true},
		{"an allocated claim of the pod counts as allocated", func(m *dratest.Manager) []string {
			m.Claims = append(m.Claims, dratest.Allocated(dratest.Claim("ns", "c", "acc", 1, false), sextant, "node", "acc-d"))
			return []string{"c"}
		}, []int32{1}, 0, true},
		{"more than the node has", func(m *dratest.Manager) []string {
			m.Claims = append(m.Claims, dratest.Claim("ns", "c", "acc", 5, false))
			return []string{"c"}
		}, nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := manager()
			pod := dratest.Pod("ns", "p", tc.claims(m)...)
			p, err := allocator(m).New(context.Background(), pod, nil)
			if err != nil {
				t.Fatal(err)
			}
			devs, ok, err := p.Devices(context.Background(), node(), m.DeviceClassResolver())
			if err != nil || ok != tc.wantOK {
				t.Fatalf("Devices: ok %v, %v; want ok %v", ok, err, tc.wantOK)
			}
			if !ok {
				return
			}
			ids, unknown := p.NUMANodes(devs, topology())
			if !slices.Equal(ids, tc.wantNUMA) || unknown != tc.wantUnknown {
				t.Errorf("NUMA nodes %v, %d unknown (devices %v); want %v, %d", ids, unknown, devs, tc.wantNUMA, tc.wantUnknown)
			}
		})
	}
}

// Allocated reads what DynamicResources' Reserve signalled, before the claim's status
// has it; a claim with neither is not allocated yet.
func TestAllocated(t *testing.T) {
	m := manager()
	c := dratest.Claim("ns", "c", "acc", 1, false)
	m.Claims = append(m.Claims, c)
	pod := dratest.Pod("ns", "p", "c")
	a := allocator(m)
	if _, ok, err := a.Allocated(pod); ok || err != nil {
		t.Fatalf("Allocated before Reserve: ok %v, %v", ok, err)
	}
	m.Pending = map[types.UID]*resourceapi.AllocationResult{c.UID: dratest.Allocation(sextant, "node", "acc-c")}
	devs, ok, err := a.Allocated(pod)
	if !ok || err != nil || !slices.Equal(devs, []structured.DeviceID{structured.MakeDeviceID(sextant, "node", "acc-c")}) {
		t.Errorf("Allocated = %v, %v, %v", devs, ok, err)
	}
	if _, err := a.New(context.Background(), dratest.Pod("ns", "p2", "missing"), nil); err == nil {
		t.Error("New with a claim that does not exist: no error")
	}
}

// A pod's extended resource that maps to a DeviceClass is predicted as the claim
// DynamicResources makes for it, on a node whose allocatable lacks the resource; on a
// node whose device plugin advertises it, there is nothing to predict.
func TestExtendedResources(t *testing.T) {
	m := manager()
	const accel = v1.ResourceName("sextant.io/accelerator")
	m.Extended = map[v1.ResourceName]*resourceapi.DeviceClass{accel: m.Classes[0]}
	a := allocator(m)
	ext := map[v1.ResourceName]int64{accel: 2, "sextant.io/gpu": 1}
	if got := a.Mapped(ext); !slices.Equal(got, []v1.ResourceName{accel}) {
		t.Fatalf("Mapped = %v, want only %s", got, accel)
	}
	p, err := a.New(context.Background(), dratest.Pod("ns", "p"), ext)
	if err != nil {
		t.Fatal(err)
	}
	devs, ok, err := p.Devices(context.Background(), node(), m.DeviceClassResolver())
	if !ok || err != nil || len(devs) != 2 {
		t.Fatalf("through DRA: %v, %v, %v; want two devices", devs, ok, err)
	}
	if ids, _ := p.NUMANodes(devs, topology()); !slices.Equal(ids, []int32{0}) {
		t.Errorf("through DRA on NUMA nodes %v, want [0]", ids)
	}
	plugin := node()
	plugin.Status.Allocatable = v1.ResourceList{accel: resource.MustParse("4")}
	if !draclaims.BackedByDRA(m.DeviceClassResolver(), node(), accel) || draclaims.BackedByDRA(m.DeviceClassResolver(), plugin, accel) {
		t.Error("BackedByDRA: want true without allocatable, false with the device plugin's")
	}
	if devs, ok, err := p.Devices(context.Background(), plugin, m.DeviceClassResolver()); !ok || err != nil || len(devs) != 0 {
		t.Errorf("through the device plugin: %v, %v, %v; want no DRA devices", devs, ok, err)
	}
}
