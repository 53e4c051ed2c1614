package heartbeat

import (
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/api/v1alpha1"
)

func bw(name string) *v1alpha1.NodeBandwidth {
	return &v1alpha1.NodeBandwidth{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func topo(name string) *v1alpha1.NodeTopology {
	return &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: name}}
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

// BenchmarkNodeOf is one lookup of a node's record among 5000, as Filter makes per node.
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
