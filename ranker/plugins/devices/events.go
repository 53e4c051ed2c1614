package devices

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/ranker/plugins/numahint"
)

// EventsToRegister lists what can make a pod DeviceAware rejected schedulable: a pod
// leaving a node or changing (frees devices, or fixes its own requests), or a new node.
// A changed NodeTopology (a device became healthy, a topology appeared) and a silent
// agent's return come from the heartbeat store instead (listener): kube-scheduler does
// not watch NodeTopology or NodeBandwidth.
func (pl *DeviceAware) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: numahint.PodUpdateHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable}},
	}, nil
}

// SignPod signs the pod's device requests: pods asking for the same devices get the same
// DeviceAware results on the same node state, so opportunistic batching can reuse a
// cycle's ranking.
func (pl *DeviceAware) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	req := PodRequest(pod)
	if req == nil {
		req = Request{}
	}
	return []fwk.SignFragment{{Key: "sextant.io/" + Name, Value: req}}, nil
}
