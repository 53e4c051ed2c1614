package numa

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/plugins/numahint"
)

// EventsToRegister lists what can make a pod NUMAAware rejected schedulable: a pod
// leaving a node (frees NUMA capacity), the pod itself being updated (a fixed policy
// annotation), or a new node. A changed NodeTopology comes from the heartbeat store
// instead (requeue.Waiting.ActivateAll): kube-scheduler does not watch NodeTopology.
func (pl *NUMAAware) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: numahint.PodUpdateHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable}},
	}, nil
}

// signature is what Filter and Score read from the pod: pods with equal signatures get
// equal NUMA results on the same node state, which lets opportunistic batching reuse a
// cycle's node ranking.
type signature struct {
	MilliCPU int64                       `json:"milliCPU"`
	Memory   int64                       `json:"memory"`
	Policy   annotations.NUMAPolicyValue `json:"policy"`
}

// SignPod signs the pod's CPU and memory requests and policy. A pod with a malformed
// policy is not signed (no batching for it).
func (pl *NUMAAware) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	policy, err := annotations.PodNUMAPolicy(pod.Annotations)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	req := PodRequest(pod)
	return []fwk.SignFragment{{Key: "sextant.io/" + Name, Value: signature{MilliCPU: req.MilliCPU, Memory: req.Memory, Policy: policy}}}, nil
}
