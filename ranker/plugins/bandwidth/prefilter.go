package bandwidth

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
)

const stateKey fwk.StateKey = Name + "/request"

// podState is the pod's parsed request, written by PreFilter and only read afterwards,
// so Clone can share it.
type podState struct {
	req annotations.BandwidthRequest
	// now is when the cycle began: reports are judged stale against it, so that one
	// cycle judges every node by the same clock and reads it once, not per node.
	now time.Time
	// unsynced is set when PreFilter refused the pod because the ledger was still being
	// rebuilt, so that PostFilter can bring it back if the rebuild ended meanwhile.
	unsynced bool
	// adjust is what AddPod and RemovePod made of one node's reservations and
	// guarantees (preemption's dry runs, nominated pods); nil without either.
	adjust *nodeAdjust
	// floor is the floor level that holds the pod's request, nil if none does: Filter
	// passes the nodes it speaks for without looking (floor.go).
	floor *floorLevel
}

// Clone shares the state: it is never changed once written, AddPod and RemovePod write
// a changed copy into the cycle state they are given.
func (s *podState) Clone() fwk.StateData { return s }

func readPodState(state fwk.CycleState) (*podState, bool) {
	if state == nil {
		return nil, false
	}
	d, err := state.Read(stateKey)
	if err != nil {
		return nil, false
	}
	s, ok := d.(*podState)
	return s, ok
}

// msgLedgerNotSynced is PreFilter's message for a pod refused while the ledger is being
// rebuilt.
const msgLedgerNotSynced = "the bandwidth ledger has not yet seen every bound pod (ranker starting); retried once it has"

// PreFilter parses the pod's annotations once per cycle. A pod without any is skipped
// by Filter (and PreScore skips Score); a pod with malformed ones is unschedulable
// until they are fixed, with a message naming the annotation and its accepted form.
//
// A pod that requires bandwidth waits, unschedulable, until the ledger's pod handler has
// seen every pod listed at start: before that the ledger lacks the reservations of pods
// already bound and Filter would over-commit their nodes. It is refused rather than
// waited for here, so that the scheduling loop goes on with other pods, and
// UnschedulableAndUnresolvable keeps preemption from evicting pods for it; the pod is
// activated when the ledger syncs (activateWhenSynced, PostFilter). A pod with only
// expected rates is not held: Filter rejects it at most for a network it names, which
// the ledger does not decide.
func (pl *BandwidthAware) PreFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !pl.scheduling.Load() {
		pl.scheduling.Store(true)
	}
	if !annotations.HasBandwidth(pod.Annotations) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	req, err := annotations.ParseBandwidth(pod.Annotations)
	if err != nil {
		filterRejections.WithLabelValues(reasonInvalidAnnotation).Inc()
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if !req.Filtered() {
		// Only expected values: nothing to filter, but Score and Reserve still apply.
		state.Write(stateKey, &podState{req: req, now: pl.now()})
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if req.HasRequired() && !pl.ledgerReady() {
		filterRejections.WithLabelValues(reasonLedgerNotSynced).Inc()
		state.Write(stateKey, &podState{req: req, now: pl.now(), unsynced: true})
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgLedgerNotSynced)
	}
	if req.HasRequired() {
		if st := pl.checkQuota(pod); st != nil {
			state.Write(stateKey, &podState{req: req, now: pl.now()})
			return nil, st
		}
	}
	now := pl.now()
	state.Write(stateKey, &podState{req: req, now: now, floor: pl.floorFor(req, now, nodes)})
	return nil, nil
}

// request returns the pod's request from the cycle state, or parses it when a caller
// (preemption dry runs, tests) did not run PreFilter. ok is false for pods the plugin
// ignores, including malformed ones (PreFilter already rejected those).
func (pl *BandwidthAware) request(state fwk.CycleState, pod *v1.Pod) (annotations.BandwidthRequest, bool) {
	s, ok := pl.podState(state, pod)
	return s.req, ok
}

// podState returns PreFilter's state, or builds it (parsing the annotations, reading
// the clock now) when PreFilter did not run on this state.
func (pl *BandwidthAware) podState(state fwk.CycleState, pod *v1.Pod) (podState, bool) {
	if s, ok := readPodState(state); ok {
		return *s, true
	}
	if !annotations.HasBandwidth(pod.Annotations) {
		return podState{}, false
	}
	req, err := annotations.ParseBandwidth(pod.Annotations)
	if err != nil {
		return podState{}, false
	}
	return podState{req: req, now: pl.now()}, true
}
