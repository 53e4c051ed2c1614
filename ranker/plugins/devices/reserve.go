package devices

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/plugins/binder"
)

// Reserve picks the exact devices for the pod on the selected node — on the NUMA nodes
// NUMAAware chose for it when possible (so NUMAAware must come before DeviceAware in the
// reserve order), else from as few NUMA nodes as possible — and holds them until the
// pod's annotation is visible. The annotation is staged for SextantBinder.
func (pl *DeviceAware) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	s, ok := readState(state)
	if !ok || s.total == 0 {
		return nil
	}
	rec := pl.nodes.Node(nodeName)
	topo := rec.Topology()
	if topo == nil {
		filterRejections.WithLabelValues(reasonNoTopology).Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgNoTopology)
	}
	if !binder.Binds(state) {
		return fwk.NewStatus(fwk.Error, msgNoBinder)
	}
	if pl.nodeInfos == nil {
		return fwk.AsStatus(fmt.Errorf("device reserve on node %s: no node lookup configured", nodeName))
	}
	nodeInfo, err := pl.nodeInfos(nodeName)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("device reserve: look up node %s: %w", nodeName, err))
	}
	want := s.wantOn(nodeInfo.Node())
	if len(want) == 0 {
		return nil // every device through DRA: DynamicResources allocates them
	}
	free := pl.free(rec, topo, nodeInfo)
	preferred, pinned := preferredNUMA(state, nodeInfo, topo, free, want)
	alloc, ok := Pick(free, want, preferred, pinned)
	if !ok {
		kind, _ := Shortfall(free, want)
		filterRejections.WithLabelValues(reasonInsufficient(kind)).Inc()
		return fwk.NewStatus(fwk.Unschedulable, msgInsufficient(kind))
	}
	s.picks.set(nodeName, alloc)
	pl.ledger.Reserve(pod.UID, nodeName, alloc)
	binder.Stage(state, annotations.DevicesAllocated, alloc.String())
	return nil
}

// msgNoBinder is Reserve's error when no SextantBinder binds the pod: the choice would
// reach the pod on nothing (the ranker may not patch pods), and the node would not hand
// the pod the devices reserved for it.
const msgNoBinder = Name + ": the profile must enable " + binder.Name + " as its binder (and disable DefaultBinder): the decision reaches the pod only on its Binding"

// Unreserve releases the pod's devices and what it staged for the Binding. It is
// idempotent.
func (pl *DeviceAware) Unreserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) {
	pl.ledger.Forget(pod.UID)
	binder.Unstage(state, annotations.DevicesAllocated)
	if s, ok := readState(state); ok {
		s.picks.delete(nodeName)
	}
}
