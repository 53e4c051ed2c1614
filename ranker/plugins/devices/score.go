package devices

import (
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/numahint"
)

// PreScore skips scoring for pods that ask for no devices.
func (pl *DeviceAware) PreScore(_ context.Context, state fwk.CycleState, _ *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	s, ok := readState(state)
	if !ok || s.total == 0 {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score is the share of the requested devices that can come from the pod's preferred
// NUMA nodes on this node, scaled to [0, MaxNodeScore]: the NUMA nodes NUMAAware chose
// for the pod's CPUs there, or, when it chose none, the one NUMA node holding the most
// of the requested devices.
func (pl *DeviceAware) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, ok := readState(state)
	if !ok || s.total == 0 {
		return 0, nil
	}
	node := nodeInfo.Node()
	if node == nil {
		return 0, nil
	}
	rec := pl.nodes.NodeOf(node)
	topo := rec.Topology()
	if topo == nil {
		return 0, nil
	}
	want := s.wantOn(node)
	total := want.Total()
	if total == 0 {
		return fwk.MaxNodeScore, nil // every device through DRA: nothing for this plugin to prefer
	}
	free := pl.free(rec, topo, nodeInfo)
	preferred, _ := preferredNUMA(state, nodeInfo, topo, free, want)
	return fwk.MaxNodeScore * FromPreferred(free, want, preferred) / total, nil
}

// ScoreExtensions returns nil: scores are already in [0, MaxNodeScore].
func (pl *DeviceAware) ScoreExtensions() fwk.ScoreExtensions { return nil }

// preferredNUMA is NUMAAware's choice for the pod on node, which holds the pod's
// devices too (see numahint), its NUMA nodes with CPUs first: devices are taken closest
// to the CPUs the pod runs on before those on CPU-less NUMA nodes of the set; pinned is
// then true, since the pod will be pinned to that set (see Pick). Without a choice it
// is the NUMA node holding the most of the requested devices (none if no free device
// has a known NUMA node).
func preferredNUMA(state fwk.CycleState, nodeInfo fwk.NodeInfo, topo *v1alpha1.NodeTopology, free *Free, want Want) (nodes []int32, pinned bool) {
	if chosen, ok := numahint.Chosen(state, nodeInfo); ok {
		return withCPUsFirst(topo, chosen), true
	}
	if best, ok := BestNUMANode(free, want); ok {
		return []int32{best}, false
	}
	return nil, false
}

// withCPUsFirst orders nodes (ascending IDs) so that the NUMA nodes with CPUs come
// before those without, keeping ID order within each. It returns nodes itself when
// nothing moves, which is every node without CPU-less NUMA nodes.
func withCPUsFirst(topo *v1alpha1.NodeTopology, nodes []int32) []int32 {
	cpuless := func(id int32) bool {
		for _, n := range topo.Status.NUMANodes {
			if n.ID == id {
				return len(n.CPUs) == 0
			}
		}
		return false
	}
	if !slices.ContainsFunc(nodes, cpuless) {
		return nodes
	}
	out := make([]int32, 0, len(nodes))
	for _, id := range nodes {
		if !cpuless(id) {
			out = append(out, id)
		}
	}
	for _, id := range nodes {
		if cpuless(id) {
			out = append(out, id)
		}
	}
	return out
}
