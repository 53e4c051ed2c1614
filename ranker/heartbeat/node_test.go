package heartbeat

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

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
