package numapin

import (
	"errors"
	"strings"
	"testing"

	"sextant.io/sextant/api/v1alpha1"
)

// fourNodes: nodes 0 and 1 with memory, 2 and 3 without (2 is closer to 1, 3 to 0).
var fourNodes = []v1alpha1.NUMANode{
	{ID: 0, CPUs: []int32{0, 1}, MemoryBytes: 1 << 30, Distances: []int32{10, 20, 30, 12}},
	{ID: 1, CPUs: []int32{2, 3}, MemoryBytes: 1 << 30, Distances: []int32{20, 10, 12, 30}},
	{ID: 2, CPUs: []int32{4, 5}, Distances: []int32{30, 12, 10, 20}},
	{ID: 3, CPUs: []int32{6, 7}, Distances: []int32{12, 30, 20, 10}},
}

func TestTarget(t *testing.T) {
	for _, c := range []struct {
		ids    []int32
		numa   []v1alpha1.NUMANode
		want   string
		reason string
	}{
		{ids: []int32{0}, numa: fourNodes, want: "cpus 0-1 mems 0"},
		{ids: []int32{0, 1}, numa: fourNodes, want: "cpus 0-3 mems 0-1"},
		// A memoryless node contributes its CPUs; the memory is the chosen nodes'.
		{ids: []int32{1, 2}, numa: fourNodes, want: "cpus 2-5 mems 1"},
		// Only memoryless nodes: the closest memory.
		{ids: []int32{2}, numa: fourNodes, want: "cpus 4-5 mems 1"},
		{ids: []int32{3}, numa: fourNodes, want: "cpus 6-7 mems 0"},
		{ids: []int32{2, 3}, numa: fourNodes, want: "cpus 4-7 mems 0-1"},
		// Without distances: every node with memory.
		{ids: []int32{1}, numa: []v1alpha1.NUMANode{{ID: 0, CPUs: []int32{0}, MemoryBytes: 1}, {ID: 1, CPUs: []int32{1}}}, want: "cpus 1 mems 0"},
		{ids: []int32{4}, numa: fourNodes, reason: reasonUnknownNUMANode},
		{ids: []int32{0, 9}, numa: fourNodes, reason: reasonUnknownNUMANode},
		{ids: []int32{1}, numa: []v1alpha1.NUMANode{{ID: 0, CPUs: []int32{0}, MemoryBytes: 1}, {ID: 1, MemoryBytes: 1}}, reason: reasonNoCPUs},
	} {
		got, err := target(c.ids, c.numa)
		if c.reason != "" {
			var r *refusal
			if !errors.As(err, &r) || r.reason != c.reason {
				t.Errorf("target(%v) error %v, want refusal %s", c.ids, err, c.reason)
			}
			if r != nil && r.reason == reasonUnknownNUMANode && !strings.Contains(r.msg, "which has NUMA nodes [0 1 2 3]") {
				t.Errorf("message %q does not say which NUMA nodes the node has", r.msg)
			}
			continue
		}
		if err != nil || got.String() != c.want {
			t.Errorf("target(%v) = %s, %v; want %s", c.ids, got, err, c.want)
		}
	}
}
