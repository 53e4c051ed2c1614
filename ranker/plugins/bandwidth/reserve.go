package bandwidth

import (
	"context"
	"strconv"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/plugins/binder"
)

// Reserve records the pod's expected (else required) rates on the node in the ledger,
// so that the next pods' Filter and Score see them before the node reports again. For a
// pod that requires bandwidth it also decides whether the placement is guaranteed (the
// node enforces the pod's network), for the pod's Binding and the metrics.
func (pl *BandwidthAware) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	req, ok := pl.request(state, pod)
	if !ok || req.Empty() {
		return nil
	}
	pl.ledger.Reserve(pod, nodeName, req)
	if req.HasRequired() {
		nw := reportNetwork(pl.reports.Node(nodeName), networkOf(req))
		guaranteed := strconv.FormatBool(nw != nil && nw.Enforced())
		binder.Stage(state, annotations.BandwidthGuaranteed, guaranteed)
		placementsTotal.WithLabelValues(guaranteed).Inc()
	}
	return nil
}

// Unreserve drops the reservation Reserve made for the pod on nodeName, and its
// decision; it is idempotent, as the framework requires.
func (pl *BandwidthAware) Unreserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	pl.ledger.Unreserve(pod.UID, nodeName)
	binder.Unstage(state, annotations.BandwidthGuaranteed)
}
