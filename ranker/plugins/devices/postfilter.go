package devices

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// PostFilter records a pod Filter rejected on some node as waiting for a NodeTopology
// change or a silent agent's return (the heartbeat store's listeners bring it back),
// and brings it back at once if either came while the attempt ran. It decides nothing:
// kube-scheduler goes on to preemption as without it.
func (pl *DeviceAware) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if pl.waiting == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	s, known := readState(state)
	var seen uint64
	if known {
		seen = s.topologyVersion
	}
	return pl.waiting.PostFilterOnVersion(ctx, pod, statuses, pl.snapshot, seen, known, pl.nodes.TopologyVersion,
		func(nodes []fwk.NodeInfo) bool { return pl.silentHeard(statuses, nodes) })
}

// silentHeard reports whether a node Filter rejected as silent is heard from now: its
// report arrived after Filter read the record, maybe before the pod was waiting for it,
// and then the listener's wake-up missed the pod.
func (pl *DeviceAware) silentHeard(statuses fwk.NodeToStatusReader, nodes []fwk.NodeInfo) bool {
	for _, ni := range nodes {
		node := ni.Node()
		if node == nil {
			continue
		}
		st := statuses.Get(node.Name)
		if st == nil || st.Plugin() != Name || st.Message() != msgSilentAgent {
			continue
		}
		if !pl.silent(pl.nodes.NodeOf(node)) {
			return true
		}
	}
	return false
}
