package bandwidth

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// PostFilter records a pod Filter rejected on some node (or PreFilter refused while the
// ledger was being rebuilt) as waiting for a report that admits it (or for the ledger).
// A report that arrived, or a rebuild that ended, while the attempt ran found the pod
// not yet waiting, so either brings it back at once. It decides nothing:
// kube-scheduler goes on to preemption as without it.
func (pl *BandwidthAware) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if pl.waiting == nil || pl.nodes == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	nodes, err := pl.nodes()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	ps, ok := pl.podState(state, pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	arrivedMeanwhile := func() bool {
		if ps.unsynced && pl.ledgerReady() {
			return true
		}
		now := pl.now()
		for _, ni := range nodes {
			report := pl.reports.NodeOf(ni.Node()).Bandwidth()
			// Arrived, not Received: a late delivery is dated back to its status write,
			// possibly before the attempt, though it only now reached the store.
			if report != nil && report.Arrived.After(ps.now) && pl.admits(pod, report, now) {
				return true
			}
		}
		return false
	}
	return pl.waiting.PostFilter(ctx, pod, statuses, nodes, arrivedMeanwhile)
}
