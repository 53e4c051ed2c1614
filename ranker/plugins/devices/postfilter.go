package devices

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// topologyChanged is the heartbeat store's listener: any NodeTopology change may make
// room for a pod Filter rejected, so every waiting pod is brought back.
func (pl *DeviceAware) topologyChanged(string) {
	pl.waiting.Activate(klog.Background(), func(*v1.Pod) bool { return true })
}

// PostFilter records a pod Filter rejected on some node as waiting for a NodeTopology
// change, and brings it back at once if one came while the attempt ran. It decides
// nothing: kube-scheduler goes on to preemption as without it.
func (pl *DeviceAware) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if pl.waiting == nil || pl.snapshot == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	nodes, err := pl.snapshot()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	s, _ := readState(state)
	changed := func() bool { return s == nil || pl.nodes.TopologyVersion() != s.topologyVersion }
	return pl.waiting.PostFilter(ctx, pod, statuses, nodes, changed)
}
