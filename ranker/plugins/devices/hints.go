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
	free := pl.free(rec, topo, nodeInfo)
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
	return byNUMA, unknown, true
}
