package heartbeat

import (
	"encoding/json"
	"fmt"
	"reflect"
	goruntime "runtime"
	"testing"
	"time"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"sextant.io/sextant/api/v1alpha1"
)

func asUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// The Store's topologies keep everything NUMAAware and DeviceAware read, and neither
// the managed fields nor a device's or NIC's description.
func TestStoreTopologyKeepsWhatPluginsRead(t *testing.T) {
	numa := func(id int32) *int32 { return &id }
	addr := "0000:18:00.0"
	now := metav1.Now()
	full := &v1alpha1.NodeTopology{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeTopology"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "u1", ResourceVersion: "7", Generation: 2,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "sextant-agent", Operation: metav1.ManagedFieldsOperationApply}}},
		Status: v1alpha1.NodeTopologyStatus{
			UpdateTime: &now, AgentVersion: "v1", NUMAPinning: v1alpha1.PinningOff,
			Summary: &v1alpha1.TopologySummary{NUMANodes: 2, CPUs: 4, Devices: 3},
			Topology: v1alpha1.Topology{
				NUMANodes: []v1alpha1.NUMANode{
					{ID: 0, CPUs: []int32{0, 1}, MemoryBytes: 1 << 30, Distances: []int32{10, 21}},
					{ID: 1, CPUs: []int32{2, 3}, MemoryBytes: 1 << 30, Distances: []int32{21, 10}},
				},
				PCIDevices: []v1alpha1.PCIDevice{
					{Address: "0000:3b:00.0", Class: "0x030200", Vendor: "0x10de", Device: "0x20b0", Driver: "nvidia",
						Kind: v1alpha1.KindGPU, NUMANode: numa(1), PCIeRoot: "pci0000:3a", Health: v1alpha1.Healthy,
						Holder: &v1alpha1.DeviceHolder{Namespace: "ns", Name: "p", UID: "pu"}},
					{Address: "0000:5e:00.0", Class: "0x010802", Kind: v1alpha1.KindNVMe, Health: v1alpha1.Unhealthy, Excluded: "in use by the host"},
					{Address: addr, Class: "0x020000", Kind: v1alpha1.KindNIC, NUMANode: numa(0), Health: v1alpha1.Healthy},
				},
				NICs: []v1alpha1.NIC{{Name: "eth0", PCIAddress: &addr, NUMANode: numa(0)}},
			},
		},
	}
	out, err := storeTopology(asUnstructured(t, full))
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*v1alpha1.NodeTopology)
	want := &v1alpha1.NodeTopology{
		TypeMeta:   full.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "u1", ResourceVersion: "7", Generation: 2},
		Status: v1alpha1.NodeTopologyStatus{NUMAPinning: v1alpha1.PinningOff, Topology: v1alpha1.Topology{
			NUMANodes: full.Status.NUMANodes,
			PCIDevices: []v1alpha1.PCIDevice{
				{Address: "0000:3b:00.0", Kind: v1alpha1.KindGPU, NUMANode: numa(1), Health: v1alpha1.Healthy,
					Holder: &v1alpha1.DeviceHolder{Namespace: "ns", Name: "p", UID: "pu"}},
				{Address: "0000:5e:00.0", Kind: v1alpha1.KindNVMe, Health: v1alpha1.Unhealthy, Excluded: "in use by the host"},
				{Address: addr, Kind: v1alpha1.KindNIC, NUMANode: numa(0), Health: v1alpha1.Healthy},
			},
		}},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("held %+v,\nwant %+v", got, want)
	}
	if err := ValidateTopology(got); err != nil {
		t.Errorf("the held topology fails validation: %v", err)
	}
	// Two objects decoded from JSON, as a list or watch delivers them, share the NUMA
	// node numbers, kinds and health values.
	raw, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	var held [2]v1alpha1.PCIDevice
	for i := range held {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			t.Fatal(err)
		}
		out, err := storeTopology(u)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = out.(*v1alpha1.NodeTopology).Status.PCIDevices[0]
	}
	a, b := held[0], held[1]
	if a.NUMANode != b.NUMANode {
		t.Error("two topologies hold separate copies of NUMA node 1's number")
	}
	if unsafe.StringData(string(a.Kind)) != unsafe.StringData(string(b.Kind)) ||
		unsafe.StringData(string(a.Health)) != unsafe.StringData(string(b.Health)) {
		t.Error("two topologies hold separate copies of a device's kind or health")
	}
}

// The store holds of a NodeBandwidth only what ParseBandwidth reads (and the capacities
// that bound it): the parsed report is the same as from the whole object.
func TestStoreTrimsBandwidth(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	dir := func(c, r, p, rem string) v1alpha1.DirectionBandwidth {
		return v1alpha1.DirectionBandwidth{Capacity: q(c), Rate: q(r), Peak: q(p), Remaining: q(rem)}
	}
	both := v1alpha1.Bandwidth{Ingress: dir("10G", "1G", "2G", "8G"), Egress: dir("10G", "3G", "4G", "6G")}
	sample := metav1.NewTime(time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC))
	full := &v1alpha1.NodeBandwidth{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeBandwidth"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "u1", ResourceVersion: "7", Labels: map[string]string{"a": "b"}},
		Status: v1alpha1.NodeBandwidthStatus{
			SampleTime: &sample, Window: &metav1.Duration{Duration: time.Minute}, AgentVersion: "v1",
			Interfaces: []v1alpha1.InterfaceBandwidth{{Name: "eth0", Bandwidth: both}, {Name: "eth1", Bandwidth: both}},
			Networks: []v1alpha1.NetworkBandwidth{{Name: "pod", Interfaces: []string{"eth0"}, Bandwidth: both,
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionGuaranteesEnforced, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonShaped,
					Message: "a long message the ranker never reads", LastTransitionTime: sample}},
				Guarantees: &v1alpha1.Guarantees{Ingress: v1alpha1.GuaranteedDirection{Capacity: q("9G"), Guaranteed: q("1G")},
					Egress: v1alpha1.GuaranteedDirection{Capacity: q("9G"), Guaranteed: q("2G")}}},
				{Name: "storage", Interfaces: []string{"eth1"}, Bandwidth: both}},
			Total: &both,
		},
	}
	for _, tc := range []struct {
		name string
		in   *v1alpha1.NodeBandwidth
	}{
		{"networks", full},
		{"legacy, total only", func() *v1alpha1.NodeBandwidth {
			o := full.DeepCopy()
			o.Status.Networks = nil
			return o
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := storeBandwidth(asUnstructured(t, tc.in))
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*v1alpha1.NodeBandwidth)
			if len(got.Status.Interfaces) != 0 || got.Labels != nil {
				t.Errorf("held interfaces %v and labels %v, want none", got.Status.Interfaces, got.Labels)
			}
			for _, n := range got.Status.Networks {
				if n.Ingress.Rate != nil || n.Egress.Peak != nil || n.Interfaces != nil {
					t.Errorf("network %s holds rates, peaks or interfaces: %+v", n.Name, n)
				}
				for _, c := range n.Conditions {
					if c.Message != "" || c.Reason != "" {
						t.Errorf("network %s holds its condition's message and reason: %+v", n.Name, c)
					}
				}
				if g := n.Guarantees; g != nil && (g.Ingress.Guaranteed != nil || g.Egress.Guaranteed != nil) {
					t.Errorf("network %s holds what its guarantees add up to: %+v", n.Name, g)
				}
			}
			if len(tc.in.Status.Networks) > 0 && got.Status.Total != nil {
				t.Errorf("held the total beside networks: %+v", got.Status.Total)
			}
			if err := ValidateBandwidth(got); err != nil {
				t.Errorf("the held object fails validation: %v", err)
			}
			if got.Name != "node-1" || got.ResourceVersion != "7" {
				t.Errorf("held identity %s/%s, want node-1/7", got.Name, got.ResourceVersion)
			}
			want, have := ParseBandwidth(tc.in), ParseBandwidth(got)
			if !have.SampleTime.Equal(want.SampleTime) {
				t.Errorf("held sampleTime %v, want %v", have.SampleTime, want.SampleTime)
			}
			want.Object, have.Object = nil, nil
			want.SampleTime, have.SampleTime = time.Time{}, time.Time{}
			if !reflect.DeepEqual(have, want) {
				t.Errorf("parsed from the held object %+v, from the whole one %+v", have, want)
			}
		})
	}
}

// BenchmarkHeldTopology reports what the store's topology informer holds per node, in
// live heap objects and bytes, for 5000 NodeTopologies shaped as make bench-ranker's
// 2numa nodes (2 NUMA nodes of 16 CPUs, 4 GPUs and a NIC, each fully described) and
// decoded from JSON as a list delivers them. The garbage collector marks every one of
// those objects in each cycle.
func BenchmarkHeldTopology(b *testing.B) {
	const nodes = 5000
	numa := func(id int32) *int32 { return &id }
	raws := make([][]byte, nodes)
	for i := range raws {
		nt := &v1alpha1.NodeTopology{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeTopology"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-node-%05d", i), UID: "3f1c2d4e-0000-4000-8000-000000000000", ResourceVersion: "123456"},
		}
		st := &nt.Status
		now := metav1.Now()
		st.UpdateTime, st.AgentVersion = &now, "v0.1.0"
		st.Summary = &v1alpha1.TopologySummary{NUMANodes: 2, CPUs: 32, Devices: 5}
		for n := range int32(2) {
			node := v1alpha1.NUMANode{ID: n, MemoryBytes: 64 << 30, Distances: []int32{10, 21}}
			for c := range int32(16) {
				node.CPUs = append(node.CPUs, n*16+c)
			}
			st.NUMANodes = append(st.NUMANodes, node)
		}
		for g, addr := range []string{"0000:3b:00.0", "0000:5e:00.0", "0000:af:00.0", "0000:d8:00.0"} {
			st.PCIDevices = append(st.PCIDevices, v1alpha1.PCIDevice{
				Address: addr, Class: "0x030200", Vendor: "0x10de", Device: "0x20b0", Driver: "nvidia",
				Kind: v1alpha1.KindGPU, NUMANode: numa(int32(g / 2)), PCIeRoot: "pci0000:3a", Health: v1alpha1.Healthy,
			})
		}
		nic := "0000:18:00.0"
		st.PCIDevices = append(st.PCIDevices, v1alpha1.PCIDevice{Address: nic, Class: "0x020000", Vendor: "0x15b3",
			Device: "0x1017", Driver: "mlx5_core", Kind: v1alpha1.KindNIC, NUMANode: numa(0), Health: v1alpha1.Healthy})
		speed := int64(10_000)
		st.NICs = []v1alpha1.NIC{{Name: "eth0", PCIAddress: &nic, NUMANode: numa(0), SpeedMbps: &speed}}
		raw, err := json.Marshal(nt)
		if err != nil {
			b.Fatal(err)
		}
		raws[i] = raw
	}
	var before, after goruntime.MemStats
	for b.Loop() {
		held := make([]any, nodes)
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		for i, raw := range raws {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(raw); err != nil {
				b.Fatal(err)
			}
			out, err := storeTopology(u)
			if err != nil {
				b.Fatal(err)
			}
			held[i] = out
		}
		goruntime.GC()
		goruntime.ReadMemStats(&after)
		goruntime.KeepAlive(held)
	}
	b.ReportMetric(float64(after.HeapObjects-before.HeapObjects)/nodes, "objects/node")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/nodes, "bytes/node")
}
