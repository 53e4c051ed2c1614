package numa

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/silence"
)

// Reserve holds the chosen NUMA capacity for the pod until its annotation is visible, so
// pods scheduled meanwhile see it taken, and stages the annotation for SextantBinder.
// The choice is the one Filter and Score made from the scheduler's snapshot of the node
// (remembered with the node's free capacity), recomputed if the snapshot has moved on;
// for a pod whose claims wait for Reserve, the one around the devices DynamicResources
// allocated it (chooseAtReserve).
// On a node whose agent does not pin (NodeTopology's numaPinning) or is silent
// (silence.After), nothing is held or staged.
func (pl *NUMAAware) Reserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	s, ok := readState(state)
	if !ok || s.idle() {
		return nil
	}
	rec := pl.nodes.Node(nodeName)
	topo := rec.Topology()
	if !hasNUMA(topo) {
		return nil // nothing to reserve or write: NUMA is unknown on this node
	}
	if !binder.Binds(state) {
		return fwk.NewStatus(fwk.Error, msgNoBinder)
	}
	if pl.nodeInfos == nil {
		return fwk.AsStatus(fmt.Errorf("numa reserve on node %s: no node lookup configured", nodeName))
	}
	nodeInfo, err := pl.nodeInfos(nodeName)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("numa reserve: look up node %s: %w", nodeName, err))
	}
	nf := pl.free(rec, topo, nodeInfo)
	var ch Choice
	var refusal *fwk.Status
	if s.claimsAtReserve {
		ch, ok, err = pl.chooseAtReserve(ctx, s, pod, nf, topo, nodeInfo.Node())
	} else {
		ch, ok, refusal, err = s.choose(ctx, nf, topo, nodeInfo.Node())
	}
	if err != nil {
		return fwk.AsStatus(err)
	}
	if refusal != nil {
		return refusal
	}
	if !ok {
		// Filter passed the node, or the floor promised room (then an event that took
		// it is still on its way to the plugin): the pod is retried, the floor redone.
		pl.floor.void()
		filterRejections.WithLabelValues(reasonNoFit).Inc()
		return fwk.NewStatus(fwk.Unschedulable, msgNoFit(shortResource([]Free{totalFree(nf.free())}, nf.effective(s.req, s.policy))))
	}
	if s.policy == annotations.PolicySingleNUMANode && len(ch.Nodes) > 1 {
		filterRejections.WithLabelValues(reasonSingleNUMANode).Inc()
		return fwk.NewStatus(fwk.Unschedulable, msgSingleNUMANode(shortResource(nf.free(), nf.effective(s.req, s.policy))))
	}
	if s.claims != nil {
		if st := pl.checkAllocated(s, pod, topo, ch); st != nil {
			return st
		}
	}
	pins := pl.pins(rec, topo)
	silent := !pins && pl.silent(rec)
	if !pins && s.policy == annotations.PolicySingleNUMANode {
		// The agent stopped pinning, or fell silent, since Filter looked, or the floor
		// let Filter be skipped on an older view: the pod is retried, the floor redone.
		pl.floor.void()
		if silent {
			filterRejections.WithLabelValues(silence.Reason).Inc()
			pl.silentNodes.Rejected(nodeName)
			return fwk.NewStatus(fwk.Unschedulable, msgSilentAgent)
		}
		filterRejections.WithLabelValues(reasonNoPinning).Inc()
		return fwk.NewStatus(fwk.Unschedulable, msgNoPinning)
	}
	s.reserved.Store(&reservedChoice{node: nodeName, choice: ch})
	if !pins {
		reason := reasonNoPinning
		if silent {
			reason = silence.Reason
		}
		undecided.WithLabelValues(reason).Inc()
		// The node's agent would not carry the choice out: nothing is written, and the
		// pod counts as spread over the node's NUMA nodes in proportion to their size,
		// as a pod without the annotation does. The floor is lowered as if each NUMA
		// node gave the whole request, which none does. The choice still places the
		// pod's devices (DeviceAware).
		free := nf.free()
		every := make([]int32, len(free))
		for i := range free {
			every[i] = free[i].ID
		}
		k := int64(len(every))
		pl.lowerFloor(free, every, Request{MilliCPU: s.req.MilliCPU * k, Memory: s.req.Memory * k})
		return nil
	}
	pl.ledger.Reserve(pod.UID, nodeName, reservation{nodes: ch.Nodes, req: s.req})
	pl.lowerFloor(nf.free(), ch.Nodes, s.req)
	binder.Stage(state, annotations.NUMANodes, annotations.FormatNUMANodes(ch.Nodes))
	return nil
}

// reservation is what a pod reserved by this plugin takes until its annotation is visible.
type reservation struct {
	nodes []int32
	req   Request
}

// msgNoBinder is Reserve's error when no SextantBinder binds the pod: the choice would
// reach the pod on nothing (the ranker may not patch pods), and the node would not pin
// the pod to the NUMA nodes reserved for it.
const msgNoBinder = Name + ": the profile must enable " + binder.Name + " as its binder (and disable DefaultBinder): the decision reaches the pod only on its Binding"

// Unreserve releases the pod's reservation and what it staged for the Binding. It is
// idempotent.
func (pl *NUMAAware) Unreserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ string) {
	pl.ledger.Forget(pod.UID)
	if s, ok := readState(state); ok {
		s.reserved.Store(nil)
	}
	binder.Unstage(state, annotations.NUMANodes)
}
