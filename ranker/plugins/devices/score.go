package devices

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/ranker/plugins/numa"
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
	free := pl.free(rec, topo, nodeInfo)
	preferred := preferredNUMA(state, nodeInfo, free, s.want)
	return fwk.MaxNodeScore * FromPreferred(free, s.want, preferred) / s.total, nil
}

// ScoreExtensions returns nil: scores are already in [0, MaxNodeScore].
func (pl *DeviceAware) ScoreExtensions() fwk.ScoreExtensions { return nil }

// preferredNUMA is NUMAAware's choice for the pod on node, else the NUMA node holding
// the most of the requested devices (none if no free device has a known NUMA node).
func preferredNUMA(state fwk.CycleState, nodeInfo fwk.NodeInfo, free *Free, want Want) []int32 {
	if chosen, ok := numa.ChosenNUMANodes(state, nodeInfo); ok {
		return chosen
	}
	if best, ok := BestNUMANode(free, want); ok {
		return []int32{best}
	}
	return nil
}
