package numa

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
)

// EventsToRegister lists what can make a pod NUMAAware rejected schedulable: a pod
// leaving a node (frees NUMA capacity), the pod itself being updated (a fixed policy
// annotation), or a new node. A changed NodeTopology comes from the heartbeat store
// instead (requeue.Waiting.ActivateAll): kube-scheduler does not watch NodeTopology.
func (pl *NUMAAware) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: PodUpdateHint},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable}},
	}, nil
}

// PodUpdateHint requeues a rejected pod when it was itself updated (a fixed annotation)
// or when a pod on a node finished (its NUMA capacity and devices are free again), and
// not for the stream of other pod status updates.
func PodUpdateHint(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	updated, ok := newObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, nil
	}
	if updated.UID == pod.UID {
		return fwk.Queue, nil
	}
	old, _ := oldObj.(*v1.Pod)
	if updated.Spec.NodeName != "" && terminal(updated) && (old == nil || !terminal(old)) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

func terminal(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
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
