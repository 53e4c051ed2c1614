package devices

import (
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/ranker/plugins/numahint"
)

// DeviceAware tells NUMAAware what each NUMA node has free, so the NUMA set it chooses
// holds the pod's devices as well as its CPUs and memory; DeviceAware then picks inside
// that set (Reserve).
var _ numahint.Provider = &DeviceAware{}

// Want is how many devices of each kind the pod asks for.
func (pl *DeviceAware) Want(pod *v1.Pod) numahint.Counts {
	var c numahint.Counts
	for _, w := range PodRequest(pod).Want() {
		c[w.Kind] = w.N
	}
	return c
}

// Free is the node's free devices by NUMA node, and those whose NUMA node is unknown:
// the same free devices Filter and Reserve use, from the same per-node cache.
func (pl *DeviceAware) Free(nodeInfo fwk.NodeInfo) (map[int32]numahint.Counts, numahint.Counts, bool) {
	var unknown numahint.Counts
	node := nodeInfo.Node()
	if node == nil {
		return nil, unknown, false
	}
	rec := pl.nodes.NodeOf(node)
	topo := rec.Topology()
	if topo == nil {
		return nil, unknown, false
	}
	byNUMA, unknown := countByNUMA(pl.free(rec, topo, nodeInfo))
	return byNUMA, unknown, true
}

// FreeIn is Free as the node is in state, where the framework may have taken pods off
// a copy of it (see simulation) whose devices the agent still publishes holders for.
// simulated is false when state holds no simulation: Free's answer stands then.
// NUMAAware's Filter asks it, so that the NUMA set it checks in preemption's dry run
// counts the victims' devices as free too.
func (pl *DeviceAware) FreeIn(state fwk.CycleState, nodeInfo fwk.NodeInfo) (byNUMA map[int32]numahint.Counts, unknown numahint.Counts, ok, simulated bool) {
	s, found := readState(state)
	if !found || s.sim == nil {
		return nil, unknown, false, false
	}
	node := nodeInfo.Node()
	if node == nil {
		return nil, unknown, false, true
	}
	rec := pl.nodes.NodeOf(node)
	topo := rec.Topology()
	if topo == nil {
		return nil, unknown, false, true
	}
	byNUMA, unknown = countByNUMA(pl.freeIn(s, rec, topo, nodeInfo))
	return byNUMA, unknown, true, true
}

// countByNUMA counts free devices by NUMA node, and apart those whose NUMA node is
// unknown.
func countByNUMA(free *Free) (map[int32]numahint.Counts, numahint.Counts) {
	var unknown numahint.Counts
	byNUMA := map[int32]numahint.Counts{}
	for k, numas := range free.numa {
		for _, n := range numas {
			if n < 0 {
				unknown[k]++
				continue
			}
			c := byNUMA[n]
			c[k]++
			byNUMA[n] = c
		}
	}
	return byNUMA, unknown
}
