package devices

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/silence"
)

// msgNoTopology is fixed so FailedScheduling events aggregate over nodes.
const msgNoTopology = "node(s) had no NodeTopology to pick devices from"

// msgSilentAgent is Filter's message for a node whose agent is silent (silence.After):
// a gone agent's device list, health and holders are not trusted for new placements,
// since its device plugin may be gone with it.
const msgSilentAgent = "node(s) had no agent heartbeat (NodeBandwidth) within the last 2m0s: their devices are not placed"

func msgInsufficient(kind v1alpha1.DeviceKind) string {
	return "node(s) didn't have enough healthy, unallocated " + string(kind.ResourceName()) + " devices"
}

// Filter keeps a node only if its NodeTopology has enough healthy, unallocated devices
// of every kind the pod asks for. A node without NodeTopology cannot name device IDs
// and is dropped (preemption cannot change that, hence UnschedulableAndUnresolvable);
// too few free devices is plain Unschedulable, which preempting holders can fix.
func (pl *DeviceAware) Filter(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, ok := readState(state)
	if !ok || s.total == 0 {
		return nil
	}
	node := nodeInfo.Node()
	if node == nil {
		filterRejections.WithLabelValues(reasonNodeNotFound).Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node not found")
	}
	rec := pl.nodes.NodeOf(node)
	topo := rec.Topology()
	if topo == nil {
		filterRejections.WithLabelValues(reasonNoTopology).Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgNoTopology)
	}
	if pl.silent(rec) {
		filterRejections.WithLabelValues(silence.Reason).Inc()
		pl.silentNodes.Rejected(node.Name)
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgSilentAgent)
	}
	if kind, short := Shortfall(pl.freeIn(s, rec, topo, nodeInfo), s.wantOn(node)); short {
		filterRejections.WithLabelValues(reasonInsufficient(kind)).Inc()
		return fwk.NewStatus(fwk.Unschedulable, msgInsufficient(kind))
	}
	return nil
}

// silent reports whether the node's agent has not been heard from within
// silence.After: no NodeBandwidth, or one that arrived too long ago.
func (pl *DeviceAware) silent(rec *heartbeat.Node) bool {
	return silence.Silent(rec.Bandwidth(), pl.now())
}

// reportArrived is the heartbeat store's NodeBandwidth listener: the first fresh report
// from a node Filter rejected as silent activates every waiting pod, since that node
// may pass Filter now and the pod's status does not say which node it waits for.
func (pl *DeviceAware) reportArrived(node string, report *heartbeat.Bandwidth) {
	if pl.waiting != nil && pl.silentNodes.Heard(node, report, pl.now()) {
		pl.waiting.ActivateAll(node)
	}
}

// free is the node's free devices by kind, counting this plugin's reservations for pods
// whose annotation is not visible yet. The result is shared: do not modify it.
//
// It is cached per (NodeInfo generation, NodeTopology object), which covers device
// health too (it lives in the NodeTopology). The ledger need not be part of the key: it
// is consulted only for a pod on the node without the annotation, and each change to
// such an entry comes with a new generation of the node (see NUMAAware's free).
func (pl *DeviceAware) free(rec *heartbeat.Node, topo *v1alpha1.NodeTopology, nodeInfo fwk.NodeInfo) *Free {
	return *pl.freeCache.Get(rec, nodeInfo.GetGeneration(), topo, func() *Free {
		// The name is read on a miss only: it is outside the record's first cache line.
		return FreeDevices(topo, nodeInfo.GetPods(), pl.reserved(rec.Name()))
	})
}

// freeIn is free as the node is in the state s belongs to: in a simulation (see
// simulation) it is computed anew and not kept, since the cache's key, the NodeInfo's
// generation, does not tell a simulation from the plain state, whose answer every
// other caller is owed.
func (pl *DeviceAware) freeIn(s *cycleState, rec *heartbeat.Node, topo *v1alpha1.NodeTopology, nodeInfo fwk.NodeInfo) *Free {
	if s.sim == nil {
		return pl.free(rec, topo, nodeInfo)
	}
	return freeDevices(topo, nodeInfo.GetPods(), pl.reserved(rec.Name()), s.sim)
}

// reserved is this plugin's reservation of a pod on node, for a pod whose annotation is
// not visible yet.
func (pl *DeviceAware) reserved(node string) func(*v1.Pod) (annotations.Allocation, bool) {
	return func(p *v1.Pod) (annotations.Allocation, bool) { return pl.ledger.Get(p.UID, node) }
}
