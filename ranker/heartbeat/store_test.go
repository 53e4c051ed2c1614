package heartbeat

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	got := ParseBandwidth(nbw)
	want := Bandwidth{Object: nbw, SampleTime: at.Time, Window: 30 * time.Second, IngressRemaining: 1_500_000_000, IngressKnown: true}
	if *got != want {
		t.Errorf("ParseBandwidth = %+v, want %+v", *got, want)
	}
	if b := ParseBandwidth(bw("bare")); !b.SampleTime.IsZero() || b.IngressKnown || b.EgressKnown || b.Window != 0 {
		t.Errorf("a report without status parsed as %+v", *b)
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

// Lookups of names added after the readers' map was published find them (first under
// the lock, then lock-free once the map is republished), also while writers run.
func TestConcurrentLookupsAndUpdates(t *testing.T) {
	s := NewFromObjects()
	const nodes = 200
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
					if n := s.Node(fmt.Sprint("node-", i)); n != nil && n.Name() != fmt.Sprint("node-", i) {
						t.Errorf("lookup of node-%d returned %s", i, n.Name())
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
	// Enough lookups republish the readers' map: from then on no lookup locks.
	for range 2 {
		for i := range nodes {
			s.Node(fmt.Sprint("node-", i))
		}
	}
	if s.nodes.dirty.Load() {
		t.Error("the readers' map was never republished")
	}
	held := 0
	for _, slot := range s.nodes.read.Load().slots {
		if slot.node != nil {
			held++
		}
	}
	if held != nodes {
		t.Errorf("readers' table holds %d nodes, want %d", held, nodes)
	}
}

// BenchmarkNode is one lookup of a node's record among 5000, as Filter makes per node.
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
