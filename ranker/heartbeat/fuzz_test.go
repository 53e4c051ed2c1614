package heartbeat

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

var reasons = []string{ReasonUndecodable, ReasonOutOfRange, ReasonInconsistent}

// seeds adds the agents' objects of kind and every poison case of it.
func seeds(f *testing.F, kind string) {
	f.Add([]byte(goodOf(kind)))
	for _, p := range poison {
		if p.kind == kind {
			f.Add(withStatus(f, goodOf(kind), p.path, p.value))
		}
	}
	f.Add([]byte(`{"status":null}`))
	f.Add([]byte(`{"status":"x"}`))
	f.Add([]byte(`{"status":{"total":{"ingress":{"capacity":1e300,"remaining":"1"}}}}`))
	f.Add([]byte(`{"metadata":{"managedFields":[{"subresource":"status","time":"2026-01-02T15:04:05Z"}]},"status":{"window":"0s"}}`))
}

// asWatched decodes data as a watch delivers an object (numbers as int64 or float64),
// as an object of kind named after a node; ok is false for what is not a JSON object.
func asWatched(data []byte, kind string) (*unstructured.Unstructured, bool) {
	var obj map[string]any
	if err := utiljson.Unmarshal(data, &obj); err != nil || obj == nil {
		return nil, false
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(v1alpha1.GroupVersion.String())
	u.SetKind(kind)
	u.SetName("node-1")
	u.SetResourceVersion("1")
	return u, true
}

// FuzzDecodeBandwidth: whatever a NodeBandwidth holds, the Store's transform never
// fails or panics, and the node's record then holds either
// nothing (a counted rejection) or a report whose figures Filter can use.
func FuzzDecodeBandwidth(f *testing.F) {
	seeds(f, kindBandwidth)
	f.Fuzz(func(t *testing.T, data []byte) {
		u, ok := asWatched(data, kindBandwidth)
		if !ok {
			return
		}
		out, err := storeBandwidth(u)
		if err != nil {
			t.Fatalf("the store's transform failed: %v", err)
		}
		s := NewFromObjects()
		s.put(out, time.Now(), true)
		b := s.Node("node-1").Bandwidth()
		switch o := out.(type) {
		case *Rejected:
			if b != nil {
				t.Fatalf("a rejected report (%v) is held: %+v", o.Err, b)
			}
			if !slices.Contains(reasons, o.Reason()) {
				t.Fatalf("rejection reason %q is not one of %v", o.Reason(), reasons)
			}
		case *v1alpha1.NodeBandwidth:
			if err := ValidateBandwidth(o); err != nil {
				t.Fatalf("an accepted report fails validation: %v", err)
			}
			if b == nil || b.Object != o || b.Received.IsZero() {
				t.Fatalf("an accepted report is not held: %+v", b)
			}
			if b.Window < 0 || b.Network(annotations.PodNetwork) == nil && len(o.Status.Networks) == 0 {
				t.Fatalf("an accepted report parses to figures Filter cannot use: %+v", b)
			}
			for _, n := range b.Networks {
				if (n.IngressKnown && n.IngressRemaining < 0) || (n.EgressKnown && n.EgressRemaining < 0) || !annotations.IsNetworkName(n.Name) {
					t.Fatalf("an accepted report parses to a network Filter cannot use: %+v", n)
				}
			}
		default:
			t.Fatalf("the transform returned %T", out)
		}
	})
}

// FuzzDecodeTopology is FuzzDecodeBandwidth for NodeTopology: an accepted topology is
// within the bounds and has each NUMA node and CPU once.
func FuzzDecodeTopology(f *testing.F) {
	seeds(f, kindTopology)
	f.Fuzz(func(t *testing.T, data []byte) {
		u, ok := asWatched(data, kindTopology)
		if !ok {
			return
		}
		out, err := storeTopology(u)
		if err != nil {
			t.Fatalf("the store's transform failed: %v", err)
		}
		s := NewFromObjects()
		s.put(out, time.Now(), true)
		held := s.Node("node-1").Topology()
		switch o := out.(type) {
		case *Rejected:
			if held != nil {
				t.Fatalf("a rejected topology (%v) is held", o.Err)
			}
			if !slices.Contains(reasons, o.Reason()) {
				t.Fatalf("rejection reason %q is not one of %v", o.Reason(), reasons)
			}
		case *v1alpha1.NodeTopology:
			if held != o {
				t.Fatal("an accepted topology is not held")
			}
			seen, cpus := map[int32]bool{}, map[int32]bool{}
			for _, n := range o.Status.NUMANodes {
				if seen[n.ID] || n.ID < 0 || n.MemoryBytes < 0 {
					t.Fatalf("accepted NUMA node %+v", n)
				}
				seen[n.ID] = true
				for _, c := range n.CPUs {
					if cpus[c] || c < 0 || c >= MaxCPUs {
						t.Fatalf("accepted CPU %d", c)
					}
					cpus[c] = true
				}
			}
			if len(seen) > MaxNUMANodes || len(o.Status.PCIDevices) > MaxDevices {
				t.Fatalf("accepted %d NUMA nodes, %d devices", len(seen), len(o.Status.PCIDevices))
			}
		default:
			t.Fatalf("the transform returned %T", out)
		}
	})
}
