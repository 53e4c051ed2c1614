package bandwidth

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// Reserve records the pod's expected (else required) rates on the node in the ledger,
// so that the next pods' Filter and Score see them before the node reports again.
func (pl *BandwidthAware) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	req, ok := pl.request(state, pod)
	if !ok || req.Empty() {
		return nil
	}
	pl.ledger.Reserve(pod, nodeName, req)
	return nil
}

// Unreserve drops the reservation Reserve made for the pod on nodeName; it is
// idempotent, as the framework requires.
func (pl *BandwidthAware) Unreserve(_ context.Context, _ fwk.CycleState, pod *v1.Pod, nodeName string) {
	pl.ledger.Unreserve(pod.UID, nodeName)
}
