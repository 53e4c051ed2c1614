package numapin

import (
	"fmt"
	"slices"

	"sextant.io/sextant/agent/cgroups"
	"sextant.io/sextant/api/v1alpha1"
)

// refusal is why a decision cannot be carried out on this node; reason is the metric's
// label.
type refusal struct {
	reason string
	msg    string
}

func (r *refusal) Error() string { return r.msg }

// Reasons a pod is not pinned as its annotation says, the label of
// sextant_numa_pin_failures_total.
const (
	reasonMalformed        = "malformed-annotation"
	reasonUnknownNUMANode  = "unknown-numa-node"
	reasonNoCPUs           = "no-cpus"
	reasonChanged          = "annotation-changed"
	reasonStaticCPUManager = "kubelet-static-cpu-manager"
	reasonStaticMemManager = "kubelet-static-memory-manager"
	reasonCgroup           = "cgroup"
	reasonRuntime          = "runtime"
	reasonTopology         = "topology"
)

var failureReasons = []string{reasonMalformed, reasonUnknownNUMANode, reasonNoCPUs, reasonChanged,
	reasonStaticCPUManager, reasonStaticMemManager, reasonCgroup, reasonRuntime, reasonTopology}

// target is the cpuset for NUMA nodes ids of this node: the CPUs of those nodes, and the
// memory of those that have memory. A NUMA node without memory contributes CPUs only;
// if none of ids has memory, the memory comes from the nodes with memory closest to
// them by the SLIT distances (the nodes the kernel itself would allocate from for those
// CPUs), or from every node with memory if the distances are unknown.
func target(ids []int32, numa []v1alpha1.NUMANode) (cgroups.Cpuset, error) {
	byID := make(map[int32]*v1alpha1.NUMANode, len(numa))
	for i := range numa {
		byID[numa[i].ID] = &numa[i]
	}
	var unknown []int32
	var cs cgroups.Cpuset
	for _, id := range ids {
		n, ok := byID[id]
		if !ok {
			unknown = append(unknown, id)
			continue
		}
		cs.CPUs = append(cs.CPUs, n.CPUs...)
		if n.MemoryBytes > 0 {
			cs.Mems = append(cs.Mems, id)
		}
	}
	if len(unknown) > 0 {
		have := make([]int32, 0, len(numa))
		for _, n := range numa {
			have = append(have, n.ID)
		}
		return cgroups.Cpuset{}, &refusal{reasonUnknownNUMANode,
			fmt.Sprintf("NUMA node(s) %v chosen for the pod do not exist on this node, which has NUMA nodes %v", unknown, have)}
	}
	if len(cs.CPUs) == 0 {
		return cgroups.Cpuset{}, &refusal{reasonNoCPUs,
			fmt.Sprintf("NUMA node(s) %v chosen for the pod have no online CPUs", ids)}
	}
	if len(cs.Mems) == 0 {
		cs.Mems = nearestMemory(ids, numa, byID)
	}
	slices.Sort(cs.CPUs)
	cs.CPUs = slices.Compact(cs.CPUs)
	slices.Sort(cs.Mems)
	return cs, nil
}

// nearestMemory is the NUMA nodes with memory at the smallest distance from any of ids.
func nearestMemory(ids []int32, numa []v1alpha1.NUMANode, byID map[int32]*v1alpha1.NUMANode) []int32 {
	var all, nearest []int32
	best := int32(-1)
	for col, m := range numa {
		if m.MemoryBytes <= 0 {
			continue
		}
		all = append(all, m.ID)
		for _, id := range ids {
			d := byID[id].Distances
			// distances are listed by NUMA node in ID order, as sysfs lists them.
			if col >= len(d) || len(d) != len(numa) {
				continue
			}
			switch {
			case best < 0 || d[col] < best:
				best, nearest = d[col], []int32{m.ID}
			case d[col] == best && !slices.Contains(nearest, m.ID):
				nearest = append(nearest, m.ID)
			}
		}
	}
	if len(nearest) == 0 {
		return all
	}
	return nearest
}
