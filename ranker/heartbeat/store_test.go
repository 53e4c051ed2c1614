package heartbeat

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	goruntime "runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

func bw(name string) *v1alpha1.NodeBandwidth {
	return &v1alpha1.NodeBandwidth{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func topo(name string) *v1alpha1.NodeTopology {
	return &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func TestNewFromObjects(t *testing.T) {
	s := NewFromObjects(bw("node-1"), topo("node-2"))
	if s.Bandwidth("node-1") == nil || s.Bandwidth("node-2") != nil {
		t.Error("bandwidth lookup wrong")
	}
	if s.Topology("node-2") == nil || s.Topology("node-1") != nil {
		t.Error("topology lookup wrong")
	}
	if s.Node("node-3") != nil || s.Bandwidth("node-3") != nil || s.Topology("node-3") != nil {
		t.Error("a node without heartbeat objects has a record")
	}
}

func TestParseBandwidth(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC))
	q := resource.MustParse("1500M")
	nbw := bw("n")
	nbw.Status = v1alpha1.NodeBandwidthStatus{
		SampleTime: &at,
		Window:     &metav1.Duration{Duration: 30 * time.Second},
		Total:      &v1alpha1.Bandwidth{Ingress: v1alpha1.DirectionBandwidth{Remaining: &q}},
	}
	// An agent older than networks: its total is the pod network.
	got := ParseBandwidth(nbw)
	if got.Object != nbw || !got.SampleTime.Equal(at.Time) || got.Window != 30*time.Second || !got.Legacy ||
		!reflect.DeepEqual(got.Networks, []Network{{Name: annotations.PodNetwork, IngressRemaining: 1_500_000_000, IngressKnown: true}}) {
		t.Errorf("ParseBandwidth = %+v, want the pod network from the total, sampleTime %v, window 30s, legacy", *got, at)
	}
	if b := ParseBandwidth(bw("bare")); !b.SampleTime.IsZero() || b.Window != 0 || !b.Legacy ||
		!reflect.DeepEqual(b.Networks, []Network{{Name: annotations.PodNetwork}}) {
		t.Errorf("a report without status parsed as %+v", *b)
	}

	// With networks, the total is not read: no path has the sum of separate NICs.
	storage, pod := resource.MustParse("9G"), resource.MustParse("700M")
	nbw.Status.Networks = []v1alpha1.NetworkBandwidth{
		{Name: "pod", Interfaces: []string{"bond0"}, Bandwidth: v1alpha1.Bandwidth{Ingress: v1alpha1.DirectionBandwidth{Remaining: &pod}, Egress: v1alpha1.DirectionBandwidth{Remaining: &pod}}},
		{Name: "storage", Interfaces: []string{"eth2"}, Bandwidth: v1alpha1.Bandwidth{Ingress: v1alpha1.DirectionBandwidth{Remaining: &storage}}},
	}
	got = ParseBandwidth(nbw)
	if got.Legacy || len(got.Networks) != 2 {
		t.Fatalf("networks parsed as %+v", got)
	}
	if n := got.Network("pod"); n == nil || *n != (Network{Name: "pod", IngressRemaining: 700e6, IngressKnown: true, EgressRemaining: 700e6, EgressKnown: true}) {
		t.Errorf("pod network %+v", n)
	}
	if n := got.Network("storage"); n == nil || *n != (Network{Name: "storage", IngressRemaining: 9e9, IngressKnown: true}) {
		t.Errorf("storage network %+v", n)
	}
	if got.Network("backup") != nil {
		t.Error("a network the report lacks was found")
	}

	// A network whose node keeps guarantees, and one whose enforcement fails.
	gin, geg := resource.MustParse("902500k"), resource.MustParse("450M")
	guarantees := &v1alpha1.Guarantees{Ingress: v1alpha1.GuaranteedDirection{Capacity: &gin}, Egress: v1alpha1.GuaranteedDirection{Capacity: &geg}}
	nbw.Status.Networks[0].Conditions = []metav1.Condition{{Type: v1alpha1.ConditionGuaranteesEnforced, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonShaped}}
	nbw.Status.Networks[0].Guarantees = guarantees
	nbw.Status.Networks[1].Conditions = []metav1.Condition{{Type: v1alpha1.ConditionGuaranteesEnforced, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonShapingFailed}}
	nbw.Status.Networks[1].Guarantees = guarantees
	got = ParseBandwidth(nbw)
	if n := got.Network("pod"); n == nil || !n.Enforced() || *n.Guarantee != (Guarantee{Ingress: 902_500_000, Egress: 450e6}) {
		t.Errorf("pod network %+v, want enforced with guarantees of 902.5M ingress and 450M egress", n)
	}
	if n := got.Network("storage"); n == nil || n.Enforced() {
		t.Errorf("storage network %+v, want not enforced (its condition is False)", n)
	}
	if ParseBandwidth(nil) != nil {
		t.Error("nil report parsed to non-nil")
	}
}

// A record lives while the node has either heartbeat object, and a record that comes
// back while readers may still hold it is the same record, so nothing read through it
// goes stale.
func TestRecordLifecycle(t *testing.T) {
	s := NewFromObjects(bw("n"), topo("n"))
	first := s.Node("n")
	s.Delete(bw("n"))
	if s.Node("n") != first || first.Bandwidth() != nil || first.Topology() == nil {
		t.Fatal("deleting one object must keep the record with the other")
	}
	s.Delete(topo("n"))
	if s.Len() != 0 {
		t.Errorf("Len = %d after both objects went, want 0", s.Len())
	}
	if n := s.Node("n"); n.Bandwidth() != nil || n.Topology() != nil {
		t.Error("a node without heartbeat objects still shows one")
	}
	again := topo("n")
	s.Put(again)
	if n := s.Node("n"); n.Topology() != again {
		t.Error("the node's new topology is not visible")
	}
	if first.Topology() != again {
		t.Error("a reader still holding the old record does not see the new topology")
	}
}

func nodeObject(name string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// NodeOf answers as Node(name) does for every Node object, across a Node object being
// replaced and the record being dropped and made again.
func TestNodeOfFollowsRecords(t *testing.T) {
	s := NewFromObjects(topo("n"))
	obj := nodeObject("n")
	rec := s.NodeOf(obj)
	if rec == nil || rec != s.Node("n") || s.NodeOf(obj) != rec {
		t.Fatal("NodeOf does not find the record Node finds")
	}
	newer := nodeObject("n") // the informer replaced the Node object
	if s.NodeOf(newer) != rec {
		t.Fatal("a new Node object of the same node finds another record")
	}
	if s.NodeOf(nodeObject("other")) != nil {
		t.Fatal("a node without heartbeat objects has a record")
	}
	s.Delete(topo("n"))
	if got := s.NodeOf(newer); got != rec || got.Topology() != nil || s.Len() != 0 {
		t.Fatal("an emptied record is not the one found, or still shows its topology")
	}
	again := topo("n")
	s.Put(again)
	if got := s.NodeOf(newer); got != rec || got.Topology() != again {
		t.Fatal("the node's objects came back into another record")
	}
}

// An empty record is removed once it has been empty for keepEmpty, at a later update.
func TestEmptyRecordsSwept(t *testing.T) {
	s := NewFromObjects(topo("gone"), topo("stays"))
	clock := time.Now()
	s.nodes.now = func() time.Time { return clock }
	s.Delete(topo("gone"))
	if s.Node("gone") == nil {
		t.Fatal("an emptied record went at once")
	}
	clock = clock.Add(keepEmpty + 2*time.Minute)
	s.Put(topo("stays"))
	if s.Node("gone") != nil {
		t.Error("a record empty for longer than keepEmpty is still found")
	}
	if s.Node("stays") == nil || s.Len() != 1 {
		t.Errorf("the live record went (Len %d)", s.Len())
	}
}

// Lookups find each node's own record while writers add records.
func TestConcurrentLookupsAndUpdates(t *testing.T) {
	s := NewFromObjects()
	const nodes = 200
	objs := make([]*v1.Node, nodes)
	for i := range objs {
		objs[i] = nodeObject(fmt.Sprint("node-", i))
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range nodes {
			s.Put(topo(fmt.Sprint("node-", i)))
			if i%3 == 0 {
				s.Put(bw(fmt.Sprint("node-", i)))
			}
		}
	}()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				for i := range nodes {
					name := fmt.Sprint("node-", i)
					if n := s.Node(name); n != nil && n.Name() != name {
						t.Errorf("lookup of node-%d returned %s", i, n.Name())
						return
					}
					if n := s.NodeOf(objs[i]); n != nil && n.Name() != name {
						t.Errorf("NodeOf node-%d returned %s", i, n.Name())
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for i := range nodes {
		n := s.Node(fmt.Sprint("node-", i))
		if n.Topology() == nil || (n.Bandwidth() != nil) != (i%3 == 0) {
			t.Fatalf("node-%d after all writes: topology %v, bandwidth %v", i, n.Topology() != nil, n.Bandwidth() != nil)
		}
	}
}

// BenchmarkNode is one lookup of a node's record among 5000, as Filter makes per node.
func BenchmarkNodeOf(b *testing.B) {
	s := NewFromObjects()
	objs := make([]*v1.Node, 5000)
	for i := range objs {
		objs[i] = nodeObject(fmt.Sprintf("bench-node-%05d", i))
		s.Put(topo(objs[i].Name))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if s.NodeOf(objs[i%len(objs)]) == nil {
			b.Fatal("missing")
		}
		i += 97
	}
}

func BenchmarkNode(b *testing.B) {
	s := NewFromObjects()
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("bench-node-%05d", i)
		s.Put(topo(names[i]))
	}
	for _, n := range names {
		s.Node(n) // publish the readers' map
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if s.Node(names[i%len(names)]) == nil {
			b.Fatal("missing")
		}
		i += 97 // stride through the cluster, as Filter's window does
	}
}

// Listeners hear of each change after the record holds it: a plugin that brings a pod
// back for a report must find the report in the store.
func TestListenersAfterTheRecord(t *testing.T) {
	s := NewFromObjects()
	var events []string
	s.AddListener(Listener{
		Bandwidth: func(node string, b *Bandwidth) {
			if s.Node(node).Bandwidth() != b {
				t.Errorf("listener for %s ran before the record held its report", node)
			}
			events = append(events, fmt.Sprintf("bandwidth %s %v", node, b != nil))
		},
		Topology: func(node string) {
			events = append(events, fmt.Sprintf("topology %s %v", node, s.Topology(node) != nil))
		},
	})
	s.Put(bw("n"))
	s.Put(topo("n"))
	s.Delete(bw("n"))
	s.Put(&Rejected{TypeMeta: metav1.TypeMeta{Kind: kindTopology}, ObjectMeta: metav1.ObjectMeta{Name: "n"}, Err: errors.New("bad")})
	want := []string{"bandwidth n true", "topology n true", "bandwidth n false", "topology n false"}
	if !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}
}

// An agent's rewrite of an unchanged NodeTopology (its resync) neither changes the
// topology version nor tells the listeners: each would void NUMAAware's floor and send
// every pod waiting for a topology change back to the queue. The store still holds the
// newest object. A change in what the plugins read, a removal and a new object do both.
func TestUnchangedTopologyRewriteIsNoChange(t *testing.T) {
	s := NewFromObjects()
	var told int
	s.AddListener(Listener{Topology: func(string) { told++ }})
	numa := func(id int32) *int32 { return &id }
	start := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	written := func(uid, rv string, minutes int, health v1alpha1.DeviceHealth) *v1alpha1.NodeTopology {
		t.Helper()
		at := metav1.NewTime(start.Add(time.Duration(minutes) * time.Minute))
		full := &v1alpha1.NodeTopology{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeTopology"},
			ObjectMeta: metav1.ObjectMeta{Name: "n", UID: types.UID(uid), ResourceVersion: rv},
			Status: v1alpha1.NodeTopologyStatus{UpdateTime: &at, AgentVersion: "v1", Topology: v1alpha1.Topology{
				NUMANodes:  []v1alpha1.NUMANode{{ID: 0, CPUs: []int32{0, 1}, MemoryBytes: 1 << 30, Distances: []int32{10}}},
				PCIDevices: []v1alpha1.PCIDevice{{Address: "0000:3b:00.0", Kind: v1alpha1.KindGPU, NUMANode: numa(0), Health: health}},
			}},
		}
		out, err := storeTopology(asUnstructured(t, full))
		if err != nil {
			t.Fatal(err)
		}
		nt, ok := out.(*v1alpha1.NodeTopology)
		if !ok {
			t.Fatalf("the store rejected the test's topology: %v", out)
		}
		return nt
	}
	steps := []struct {
		name   string
		do     func()
		rv     string
		change bool
	}{
		{"first", func() { s.Put(written("u1", "1", 0, v1alpha1.Healthy)) }, "1", true},
		{"rewritten unchanged", func() { s.Put(written("u1", "2", 10, v1alpha1.Healthy)) }, "2", false},
		{"a device turned unhealthy", func() { s.Put(written("u1", "3", 11, v1alpha1.Unhealthy)) }, "3", true},
		{"rewritten unchanged again", func() { s.Put(written("u1", "4", 21, v1alpha1.Unhealthy)) }, "4", false},
		{"removed", func() { s.Delete(written("u1", "4", 21, v1alpha1.Unhealthy)) }, "", true},
		{"created again", func() { s.Put(written("u2", "6", 22, v1alpha1.Unhealthy)) }, "6", true},
		{"a new object, the same topology", func() { s.Put(written("u3", "8", 23, v1alpha1.Unhealthy)) }, "8", true},
	}
	for _, step := range steps {
		version, wasTold := s.TopologyVersion(), told
		step.do()
		if changed := s.TopologyVersion() != version; changed != step.change {
			t.Errorf("%s: topology version changed %v, want %v", step.name, changed, step.change)
		}
		if heard := told != wasTold; heard != step.change {
			t.Errorf("%s: listener told %v, want %v", step.name, heard, step.change)
		}
		var rv string
		if held := s.Topology("n"); held != nil {
			rv = held.ResourceVersion
		}
		if rv != step.rv {
			t.Errorf("%s: the store holds resource version %q, want %q", step.name, rv, step.rv)
		}
	}
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

// A report's Received is its arrival on the ranker's clock, whatever the agent's
// sampleTime says; a version delivered again keeps its first arrival; what the ranker
// lists at startup is dated by the API server's status write when that is earlier.
func TestReceived(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	agentClock := metav1.NewTime(t0.Add(time.Hour)) // an agent whose clock runs ahead
	version := func(rv string) *v1alpha1.NodeBandwidth {
		b := bw("n")
		b.ResourceVersion = rv
		b.Status.SampleTime = &agentClock
		return b
	}
	s := NewFromObjects()
	s.PutAt(version("1"), t0)
	if got := s.Node("n").Bandwidth().Received; !got.Equal(t0) {
		t.Errorf("received %v, want the arrival %v", got, t0)
	}
	s.PutAt(version("1"), t0.Add(time.Minute))
	if got := s.Node("n").Bandwidth().Received; !got.Equal(t0) {
		t.Errorf("a relisted version received %v, want its first arrival %v", got, t0)
	}
	s.PutAt(version("2"), t0.Add(2*time.Minute))
	if got := s.Node("n").Bandwidth().Received; !got.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("a new version received %v, want %v", got, t0.Add(2*time.Minute))
	}

	// Through the transform, as the informer delivers a listed object.
	written := metav1.NewTime(t0.Add(-10 * time.Minute))
	listed := version("3")
	listed.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeBandwidth"}
	listed.Name = "m"
	listed.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "sextant-agent", Subresource: "status", Time: &written, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{}}`)}},
		{Manager: "kubectl", Time: &metav1.Time{Time: t0}}, // a label, not a report
	}
	out, err := storeBandwidth(asUnstructured(t, listed))
	if err != nil {
		t.Fatal(err)
	}
	kept := out.(*v1alpha1.NodeBandwidth)
	if len(kept.ManagedFields) != 1 || kept.ManagedFields[0].FieldsV1 != nil {
		t.Errorf("managed fields kept: %+v, want the status write's time only", kept.ManagedFields)
	}
	s.put(kept, t0, true)
	if got := s.Node("m").Bandwidth().Received; !got.Equal(written.Time) {
		t.Errorf("listed at startup: received %v, want the status write %v", got, written.Time)
	}
	s.put(kept.DeepCopy(), t0, false)
	s.Delete(kept)
	s.put(kept, t0, false)
	if got := s.Node("m").Bandwidth().Received; !got.Equal(t0) {
		t.Errorf("watched: received %v, want the arrival %v", got, t0)
	}
	future := kept.DeepCopy()
	future.Name = "f"
	future.ManagedFields[0].Time = &metav1.Time{Time: t0.Add(time.Hour)}
	s.put(future, t0, true)
	if got := s.Node("f").Bandwidth().Received; !got.Equal(t0) {
		t.Errorf("listed, written after the listing: received %v, want the listing %v", got, t0)
	}
}

// A new version the watch delivers late (the relist after a watch break) is dated as if
// it had come as promptly as the node's previous one, so that a report an agent wrote
// during the break and then died does not count as fresh; a delay both versions share
// (a skewed clock) leaves the arrival as it is.
func TestReceivedLateDelivery(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	const staleAfter = time.Minute
	written := func(rv string, at time.Time) *v1alpha1.NodeBandwidth {
		b := bw("n")
		b.ResourceVersion = rv
		if !at.IsZero() {
			b.ManagedFields = []metav1.ManagedFieldsEntry{{Subresource: "status", Time: &metav1.Time{Time: at}}}
		}
		return b
	}
	for _, c := range []struct {
		name                 string
		prevWritten, prevArr time.Time // zero prevArr: no previous report
		newWritten           time.Time
		want                 time.Time // Received of the new version, which arrives at t0
	}{
		{"written during a watch break, 3 min ago", t0.Add(-4 * time.Minute), t0.Add(-4 * time.Minute), t0.Add(-3 * time.Minute), t0.Add(-3 * time.Minute)},
		{"prompt", t0.Add(-10 * time.Second), t0.Add(-10 * time.Second), t0.Add(-time.Second), t0},
		{"within the allowance", t0.Add(-20 * time.Second), t0.Add(-20 * time.Second), t0.Add(-lateAllowance), t0},
		{"API server's clock 3 min behind", t0.Add(-3*time.Minute - 10*time.Second), t0.Add(-10 * time.Second), t0.Add(-3 * time.Minute), t0},
		{"API server's clock 1 min ahead", t0.Add(50 * time.Second), t0.Add(-10 * time.Second), t0.Add(time.Minute), t0},
		{"clock 3 min behind and a watch break", t0.Add(-8 * time.Minute), t0.Add(-5 * time.Minute), t0.Add(-5 * time.Minute), t0.Add(-2 * time.Minute)},
		{"no previous report: may be skew", time.Time{}, time.Time{}, t0.Add(-3 * time.Minute), t0},
		{"previous without a write time", time.Time{}, t0.Add(-4 * time.Minute), t0.Add(-3 * time.Minute), t0},
		{"no write time", t0.Add(-4 * time.Minute), t0.Add(-4 * time.Minute), time.Time{}, t0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewFromObjects()
			if !c.prevArr.IsZero() {
				s.put(written("1", c.prevWritten), c.prevArr, false)
			}
			s.put(written("2", c.newWritten), t0, false)
			got := s.Node("n").Bandwidth().Received
			if !got.Equal(c.want) {
				t.Errorf("received %v, want %v", got, c.want)
			}
			// However it is dated, Arrived is when it came in.
			if arr := s.Node("n").Bandwidth().Arrived; !arr.Equal(t0) {
				t.Errorf("arrived %v, want %v", arr, t0)
			}
			if stale, wantStale := t0.Sub(got) > staleAfter, t0.Sub(c.want) > staleAfter; stale != wantStale {
				t.Errorf("stale after %v: %v, want %v", staleAfter, stale, wantStale)
			}
			// Delivered again (another relist): still its first dating.
			s.put(written("2", c.newWritten), t0.Add(time.Hour), false)
			if again := s.Node("n").Bandwidth().Received; !again.Equal(got) {
				t.Errorf("delivered again: received %v, want %v", again, got)
			}
			if arr := s.Node("n").Bandwidth().Arrived; !arr.Equal(t0) {
				t.Errorf("delivered again: arrived %v, want its first arrival %v", arr, t0)
			}
		})
	}
}

func asUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
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

// BenchmarkCreateRecords: what the copy on write costs a ranker that lists 5000 nodes'
// heartbeats at startup, each node's record created in turn.
func BenchmarkCreateRecords(b *testing.B) {
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("bench-node-%05d", i)
	}
	for b.Loop() {
		s := NewFromObjects()
		for _, n := range names {
			s.Put(topo(n))
		}
	}
}

// New records are found at once, published with the others in batches, and a reader's
// miss publishes what waits; a node without a record stays without one.
func TestIndexPublishesPendingRecords(t *testing.T) {
	x := newIndex()
	for i := range 63 {
		x.update(fmt.Sprintf("n%d", i), func(n *Node) { n.topology.Store(topo(n.name)) })
	}
	if got := len(*x.records.Load()); got != 0 || !x.hasPending.Load() {
		t.Fatalf("after 63 records: %d published, pending %v; want 0 published, some pending", got, x.hasPending.Load())
	}
	x.update("n63", func(n *Node) { n.topology.Store(topo(n.name)) })
	if got := len(*x.records.Load()); got != 64 || x.hasPending.Load() {
		t.Fatalf("after 64 records: %d published, pending %v; want all 64 in one batch", got, x.hasPending.Load())
	}
	x.update("late", func(n *Node) { n.topology.Store(topo(n.name)) })
	if n := x.get("late"); n == nil || n.Name() != "late" {
		t.Fatalf("a pending record is not found: %v", n)
	}
	if x.hasPending.Load() || len(*x.records.Load()) != 65 {
		t.Fatal("the reader's miss did not publish the pending record")
	}
	if x.get("none") != nil {
		t.Fatal("a node without a record has one")
	}
	seen := 0
	x.each(func(*Node) { seen++ })
	if seen != 65 || x.len() != 65 {
		t.Fatalf("each saw %d records, len %d; want 65", seen, x.len())
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
