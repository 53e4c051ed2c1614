package devices

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/v1alpha1"
)

// msgNoTopology is fixed so FailedScheduling events aggregate over nodes.
const msgNoTopology = "node(s) had no NodeTopology to pick devices from"

func msgInsufficient(kind v1alpha1.DeviceKind) string {
	return "node(s) didn't have enough healthy, unallocated " + string(ResourceName(kind)) + " devices"
}

// Filter keeps a node only if its NodeTopology has enough healthy, unallocated devices
// of every kind the pod asks for. A node without NodeTopology cannot name device IDs
// and is dropped (preemption cannot change that, hence UnschedulableAndUnresolvable);
// too few free devices is plain Unschedulable, which preempting holders can fix.
func (pl *DeviceAware) Filter(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, ok := readState(state)
	if !ok || s.req.Total() == 0 {
		return nil
	}
	node := nodeInfo.Node()
	if node == nil {
		filterRejections.WithLabelValues(reasonNodeNotFound).Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node not found")
	}
	topo := pl.topologies.Topology(node.Name)
	if topo == nil {
		filterRejections.WithLabelValues(reasonNoTopology).Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgNoTopology)
	}
	if kind, short := Shortfall(pl.free(topo, nodeInfo), s.req); short {
		filterRejections.WithLabelValues(reasonInsufficient(kind)).Inc()
		return fwk.NewStatus(fwk.Unschedulable, msgInsufficient(kind))
	}
	return nil
}

func (pl *DeviceAware) free(topo *v1alpha1.NodeTopology, nodeInfo fwk.NodeInfo) map[v1alpha1.DeviceKind][]v1alpha1.PCIDevice {
	node := nodeInfo.Node().Name
	return FreeDevices(topo, nodeInfo.GetPods(), func(p *v1.Pod) (Allocation, bool) {
		return pl.ledger.get(p.UID, node)
	})
}
