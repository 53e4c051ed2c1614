package numa

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/draclaims"
	"sextant.io/sextant/ranker/plugins/draclaims/dratest"
	"sextant.io/sextant/ranker/plugins/numahint"
)

// draNode is "node": two NUMA nodes of 2 CPUs and 4 GiB, two of sextant's accelerators
// on each, and a device of another driver that publishes only its PCI address (on NUMA
// node 1 by the NodeTopology) and one that publishes neither.
func draNode() (*v1alpha1.NodeTopology, *dratest.Manager) {
	topo := uniform("node", 2, 2, 4*gi)
	topo.Status.PCIDevices = []v1alpha1.PCIDevice{{Address: "0000:af:00.0", NUMANode: ptr.To[int32](1)}}
	n := func(i int64) *int64 { return &i }
	m := &dratest.Manager{
		Slices: []*resourceapi.ResourceSlice{
			dratest.Slice("sextant.io", "node",
				dratest.Device{Name: "acc-a", NUMANode: n(0)}, dratest.Device{Name: "acc-b", NUMANode: n(0)},
				dratest.Device{Name: "acc-c", NUMANode: n(1)}, dratest.Device{Name: "acc-d", NUMANode: n(1)}),
			dratest.Slice("pci.example.com", "node", dratest.Device{Name: "x1", PCIBusID: "0000:af:00.0"}),
			dratest.Slice("blind.example.com", "node", dratest.Device{Name: "y"}),
		},
		Classes: []*resourceapi.DeviceClass{
			dratest.Class("acc", "sextant.io"), dratest.Class("x", "pci.example.com"), dratest.Class("y", "blind.example.com"),
		},
	}
	return topo, m
}

// claimCycle is the plugin over draNode's topology and DRA manager m, the empty node,
// and a fresh cycle for pod p, which is given claim "c".
func claimCycle(t *testing.T, topo *v1alpha1.NodeTopology, m *dratest.Manager, p *corev1.Pod) (*NUMAAware, *framework.NodeInfo, fwk.CycleState) {
	t.Helper()
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, claimRef("c"))
	ni := nodeInfo("node")
	pl, _ := newPlugin(t, []*framework.NodeInfo{ni}, topo)
	withDRA(pl, m)
	return pl, ni, newState()
}

func withDRA(pl *NUMAAware, m *dratest.Manager) *NUMAAware {
	pl.dra = draclaims.Allocator{Manager: m, CEL: cel.NewCache(10, cel.Features{})}
	return pl
}

func TestFilterWithClaims(t *testing.T) {
	single := map[string]string{annotations.NUMAPolicy: "single-numa-node"}
	for _, tc := range []struct {
		name       string
		setup      func(m *dratest.Manager) []string
		pods       []string // NUMA nodes of 2-CPU pods already on the node
		policy     map[string]string
		cpu        string
		wantCode   fwk.Code
		wantReason string
		wantNodes  string
	}{
		{name: "two accelerators and the CPUs on NUMA node 0", policy: single, cpu: "1", wantNodes: "0",
			setup: func(m *dratest.Manager) []string {
				m.Claims = append(m.Claims, dratest.Claim("default", "c", "acc", 2, false))
				return []string{"c"}
			}},
		{name: "no CPU request: pinned where the devices are", policy: single, wantNodes: "1",
			setup: func(m *dratest.Manager) []string {
				m.Claims = append(m.Claims, dratest.Allocated(dratest.Claim("default", "held", "acc", 2, false), "sextant.io", "node", "acc-a", "acc-b"),
					dratest.Claim("default", "c", "acc", 1, false))
				return []string{"c"}
			}},
		{name: "devices on NUMA node 0, its CPUs taken", policy: single, cpu: "1", pods: []string{"0"},
			wantCode: fwk.Unschedulable, wantReason: "enough free cpu",
			setup: func(m *dratest.Manager) []string {
				m.Claims = append(m.Claims, dratest.Claim("default", "c", "acc", 2, false))
				return []string{"c"}
			}},
		{name: "spread over both NUMA nodes", policy: single, cpu: "1",
			wantCode: fwk.Unschedulable, wantReason: "DRA devices would sit on more than one NUMA node",
			setup: func(m *dratest.Manager) []string {
				m.Claims = append(m.Claims, dratest.Allocated(dratest.Claim("default", "held", "acc", 1, false), "sextant.io", "node", "acc-a"),
					dratest.Claim("default", "c", "acc", 2, false))
				return []string{"c"}
			}},
		{name: "a numaNode constraint keeps them on NUMA node 1", policy: single, cpu: "1", wantNodes: "1",
			setup: func(m *dratest.Manager) []string {
				m.Claims = append(m.Claims, dratest.Allocated(dratest.Claim("default", "held", "acc", 1, false), "sextant.io", "node", "acc-a"),
					dratest.Claim("default", "c", "acc", 2, true))
				return []string{"c"}
			}},
		{name: "a pciBusID-only device with an accelerator beside it", policy: single, cpu: "1", wantNodes: "1",
			setup: func(m *dratest.Manager) []string {
				m.Claims = append(m.Claims, dratest.Allocated(dratest.Claim("default", "held", "acc", 2, false), "sextant.io", "node", "acc-a", "acc-b"),
					dratest.Claim("default", "c", "acc", 1, false), dratest.Claim("default", "d", "x", 1, false))
				return []string{"c", "d"}
			}},
		{name: "a device of unknown NUMA node under single-numa-node", policy: single, cpu: "1",
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: "no known NUMA node",
			setup: func(m *dratest.Manager) []string {
				m.Claims = append(m.Claims, dratest.Claim("default", "c", "y", 1, false))
				return []string{"c"}
			}},
		{name: "more devices than the node has: left to DynamicResources", policy: single, cpu: "1",
			setup: func(m *dratest.Manager) []string {
				m.Claims = append(m.Claims, dratest.Claim("default", "c", "acc", 5, false))
				return []string{"c"}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, m := draNode()
			p := pod("p", tc.cpu, 0, tc.policy)
			for _, c := range tc.setup(m) {
				p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, claimRef(c))
			}
			var existing []*corev1.Pod
			for i, nodes := range tc.pods {
				existing = append(existing, on("node", pod("busy"+string(rune('a'+i)), "2", 0, map[string]string{annotations.NUMANodes: nodes})))
			}
			ni := nodeInfo("node", existing...)
			pl, _ := newPlugin(t, []*framework.NodeInfo{ni}, topo)
			withDRA(pl, m)
			ctx := context.Background()
			state := newState()
			if _, st := pl.PreFilter(ctx, state, p, nil); !st.IsSuccess() {
				t.Fatalf("PreFilter = %v, want success: a pod with claims is always filtered", st)
			}
			st := pl.Filter(ctx, state, p, ni)
			if st.Code() != tc.wantCode || !strings.Contains(st.Message(), tc.wantReason) {
				t.Fatalf("Filter = %v, want %v containing %q", st, tc.wantCode, tc.wantReason)
			}
			if tc.wantNodes == "" {
				return
			}
			if nodes, ok := numahint.Chosen(state, ni); !ok || annotations.FormatNUMANodes(nodes) != tc.wantNodes {
				t.Errorf("chosen %v (%v), want %s", nodes, ok, tc.wantNodes)
			}
		})
	}
}

// A pod with claims and no NUMA policy is not predicted node by node: Filter and Score
// treat it by its CPUs and memory, and Reserve builds the set around the NUMA nodes of
// the devices DynamicResources allocated it (whose Reserve ran before), or, with no
// allocation visible, of those predicted on the chosen node.
func TestReserveReadsTheAllocationWithoutAPolicy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cpu       string
		claims    func(m *dratest.Manager) []string
		allocated []string // DynamicResources' pending allocation of claim "c" (nil: none)
		driver    string
		wantValue string
	}{
		{name: "devices on NUMA node 1, where the CPUs fit too", cpu: "1", allocated: []string{"acc-c", "acc-d"}, wantValue: "1"},
		{name: "devices on both NUMA nodes", cpu: "1", allocated: []string{"acc-b", "acc-c"}, wantValue: "0,1"},
		{name: "devices on NUMA node 1 and more CPUs than it has", cpu: "3", allocated: []string{"acc-c"}, wantValue: "0,1"},
		{name: "no CPU request: where the devices are", allocated: []string{"acc-d"}, wantValue: "1"},
		{name: "a device of unknown NUMA node adds none", cpu: "1", driver: "blind.example.com", allocated: []string{"y"}, wantValue: "0"},
		{name: "no allocation visible: predicted on the node", cpu: "1", wantValue: "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, m := draNode()
			class, driver := "acc", "sextant.io"
			if tc.driver != "" {
				class, driver = "y", tc.driver
			}
			count := int64(len(tc.allocated))
			if tc.allocated == nil {
				// NUMA node 0's accelerators are held: the prediction puts these on 1.
				count = 2
				m.Claims = append(m.Claims, dratest.Allocated(dratest.Claim("default", "held", "acc", 2, false), "sextant.io", "node", "acc-a", "acc-b"))
			}
			claim := dratest.Claim("default", "c", class, count, false)
			m.Claims = append(m.Claims, claim)
			p := pod("p", tc.cpu, 0, nil)
			pl, ni, state := claimCycle(t, topo, m, p)
			ctx := context.Background()
			if _, st := pl.PreFilter(ctx, state, p, []fwk.NodeInfo{ni}); !st.IsSuccess() && !st.IsSkip() {
				t.Fatal(st)
			}
			if s, _ := readState(state); s.claims != nil || !s.claimsAtReserve {
				t.Fatalf("PreFilter: claims predicted %v, left to Reserve %v; want left to Reserve", s.claims != nil, s.claimsAtReserve)
			}
			if st := pl.Filter(ctx, state, p, ni); !st.IsSuccess() {
				t.Fatal(st)
			}
			if tc.allocated != nil {
				m.Pending = map[types.UID]*resourceapi.AllocationResult{claim.UID: dratest.Allocation(driver, "node", tc.allocated...)}
			}
			if st := pl.Reserve(ctx, state, p, "node"); !st.IsSuccess() {
				t.Fatalf("Reserve = %v", st)
			}
			if got := binder.Staged(state)[annotations.NUMANodes]; got != tc.wantValue {
				t.Errorf("staged %q, want %q", got, tc.wantValue)
			}
		})
	}
}

// The framework cancels Filter's context once it has found enough nodes, while other
// nodes' Filters still run. The allocator stops then; the node is left out, not an error
// that would fail the pod's cycle (as it did in bench-ranker's DRA shape).
func TestFilterWithClaimsStoppedByTheScheduler(t *testing.T) {
	topo, m := draNode()
	m.Claims = append(m.Claims, dratest.Claim("default", "c", "acc", 2, false))
	p := pod("p", "1", 0, map[string]string{annotations.NUMAPolicy: "single-numa-node"})
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, claimRef("c"))
	ni := nodeInfo("node")
	pl, _ := newPlugin(t, []*framework.NodeInfo{ni}, topo)
	withDRA(pl, m)
	state := newState()
	if _, st := pl.PreFilter(context.Background(), state, p, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter = %v, want success", st)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("findNodesThatPassFilters has found enough nodes"))
	st := pl.Filter(ctx, state, p, ni)
	if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "found enough nodes") {
		t.Fatalf("Filter with a cancelled context = %v, want Unschedulable naming the cause", st)
	}
}

// Reserve runs after DynamicResources' Reserve: it stages the choice when the
// allocation in flight sits where it was predicted, and fails the cycle when it does
// not (the allocator's inputs changed between the plugins' PreFilters).
func TestReserveChecksTheAllocation(t *testing.T) {
	single := map[string]string{annotations.NUMAPolicy: "single-numa-node"}
	for _, tc := range []struct {
		name      string
		allocated []string
		wantCode  fwk.Code
		wantValue string
	}{
		{"allocated as predicted", []string{"acc-a", "acc-b"}, fwk.Success, "0"},
		{"allocated on the other NUMA node", []string{"acc-c", "acc-d"}, fwk.Unschedulable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, m := draNode()
			claim := dratest.Claim("default", "c", "acc", 2, false)
			m.Claims = append(m.Claims, claim)
			p := pod("p", "1", 0, single)
			pl, ni, state := claimCycle(t, topo, m, p)
			ctx := context.Background()
			if _, st := pl.PreFilter(ctx, state, p, nil); !st.IsSuccess() {
				t.Fatal(st)
			}
			if st := pl.Filter(ctx, state, p, ni); !st.IsSuccess() {
				t.Fatal(st)
			}
			m.Pending = map[types.UID]*resourceapi.AllocationResult{claim.UID: dratest.Allocation("sextant.io", "node", tc.allocated...)}
			st := pl.Reserve(ctx, state, p, "node")
			if st.Code() != tc.wantCode {
				t.Fatalf("Reserve = %v, want %v", st, tc.wantCode)
			}
			if got := binder.Staged(state)[annotations.NUMANodes]; got != tc.wantValue {
				t.Errorf("staged %q, want %q", got, tc.wantValue)
			}
		})
	}
}

func TestChoiceWith(t *testing.T) {
	free := func(cpus ...int64) []Free {
		out := make([]Free, len(cpus))
		for i, c := range cpus {
			out[i] = Free{ID: int32(i), MilliCPU: c * 1000, Memory: 4 * gi}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		free []Free
		cpu  int64
		must []int
		want string
		ok   bool
	}{
		{"must alone covers", free(2, 2, 2), 2, []int{2}, "2", true},
		{"must plus the closest other", free(1, 1, 2, 2), 2, []int{0}, "0,1", true},
		{"two musts", free(2, 2, 2), 1, []int{0, 2}, "0,2", true},
		{"nothing covers", free(1, 1), 3, []int{0}, "", false},
		{"no must: the best set", free(1, 2), 2, nil, "1", true},
		{"greedy beyond 12 NUMA nodes", free(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), 3, []int{13}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := uniform("n", len(tc.free), 1, 4*gi)
			ch, ok := choiceWith(tc.free, Request{MilliCPU: tc.cpu * 1000}, tc.must, lazyDistances{topo: topo})
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			for _, m := range tc.must {
				if !containsID(ch.Nodes, tc.free[m].ID) {
					t.Errorf("choice %v lacks must NUMA node %d", ch.Nodes, tc.free[m].ID)
				}
			}
			if tc.want != "" && annotations.FormatNUMANodes(ch.Nodes) != tc.want {
				t.Errorf("choice %v, want %s", ch.Nodes, tc.want)
			}
			if !setCovers(tc.free, indexes(tc.free, ch.Nodes), Request{MilliCPU: tc.cpu * 1000}) {
				t.Errorf("choice %v does not cover the request", ch.Nodes)
			}
		})
	}
}

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func indexes(free []Free, ids []int32) []int {
	var out []int
	for i, f := range free {
		if containsID(ids, f.ID) {
			out = append(out, i)
		}
	}
	return out
}

func claimRef(name string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(name)}
}

// noFreeDevices is a device provider for a pod asking for accelerators on a node whose
// device plugin has none free (its accelerators are served through DRA).
type noFreeDevices struct{ want numahint.Counts }

func (p noFreeDevices) Want(*corev1.Pod) numahint.Counts { return p.want }
func (p noFreeDevices) Free(fwk.NodeInfo) (map[int32]numahint.Counts, numahint.Counts, bool) {
	return map[int32]numahint.Counts{}, numahint.Counts{}, true
}

// A pod asking for sextant.io/accelerator, which a DeviceClass maps (KEP-5004), on a
// node whose allocatable lacks it: DynamicResources' claim for it is predicted, and the
// pod goes where those accelerators are, not refused for want of device-plugin ones.
func TestExtendedResourceThroughDRA(t *testing.T) {
	topo, m := draNode()
	accel := v1alpha1.KindAccelerator.ResourceName()
	m.Extended = map[corev1.ResourceName]*resourceapi.DeviceClass{accel: m.Classes[0]}
	var want numahint.Counts
	want[slices.Index(v1alpha1.RequestableDeviceKinds[:], v1alpha1.KindAccelerator)] = 2
	ni := nodeInfo("node")
	pl, _ := newPlugin(t, []*framework.NodeInfo{ni}, topo)
	withDRA(pl, m).WithDevices(noFreeDevices{want: want})
	p := pod("p", "1", 0, map[string]string{annotations.NUMAPolicy: "single-numa-node"})
	ctx := context.Background()
	state := newState()
	if _, st := pl.PreFilter(ctx, state, p, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter = %v", st)
	}
	if st := pl.Filter(ctx, state, p, ni); !st.IsSuccess() {
		t.Fatalf("Filter = %v, want success: the accelerators come through DRA", st)
	}
	if nodes, ok := numahint.Chosen(state, ni); !ok || annotations.FormatNUMANodes(nodes) != "0" {
		t.Errorf("chosen %v (%v), want 0, where first fit puts the two accelerators", nodes, ok)
	}
	// With the device plugin advertising them, they are the device plugin's again.
	ni.Node().Status.Allocatable = corev1.ResourceList{accel: resource.MustParse("4")}
	state = newState()
	if _, st := pl.PreFilter(ctx, state, p, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter = %v", st)
	}
	if st := pl.Filter(ctx, state, p, ni); st.IsSuccess() {
		t.Error("Filter passed a node whose device plugin has no accelerator free")
	}
}
