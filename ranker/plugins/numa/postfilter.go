package numa

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/ranker/plugins/silence"
)

// PostFilter records a pod Filter rejected on some node as waiting for a NodeTopology
// change or a silent agent's return (the heartbeat store's listener brings it back),
// and brings it back at once if either came while the attempt ran. It decides nothing:
// kube-scheduler goes on to preemption as without it.
func (pl *NUMAAware) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if pl.waiting == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	s, ok := readState(state)
	var seen uint64
	if ok {
		seen = s.topologyVersion
	}
	return pl.waiting.PostFilterOnVersion(ctx, pod, statuses, pl.snapshot, seen, ok, pl.nodes.TopologyVersion,
		func(nodes []fwk.NodeInfo) bool {
			return silence.HeardDuring(statuses, nodes, Name, msgSilentAgent, func(n *v1.Node) bool { return pl.silent(pl.nodes.NodeOf(n)) })
		})
}
