package bandwidth

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
)

var _ fwk.PreFilterExtensions = &BandwidthAware{}

// PreFilterExtensions implements fwk.PreFilterPlugin: AddPod and RemovePod let
// kube-scheduler's preemption (and its check of nominated pods) see a node without its
// lower-priority pods' bandwidth, as NodeResourcesFit does for CPU and memory.
func (pl *BandwidthAware) PreFilterExtensions() fwk.PreFilterExtensions { return pl }

// nodeAdjust is what preemption's dry run took off one node's reservations and
// guarantees on the pod's network (negative: added).
type nodeAdjust struct {
	node string
	res  networkReserved
}

// apply returns res less the adjustment.
func (a *nodeAdjust) apply(res networkReserved) networkReserved {
	res.ingress -= a.res.ingress
	res.egress -= a.res.egress
	res.guaranteedIn = max(res.guaranteedIn-a.res.guaranteedIn, 0)
	res.guaranteedEg = max(res.guaranteedEg-a.res.guaranteedEg, 0)
	return res
}

// RemovePod takes the pod's bandwidth off the node for the cycle's dry run: the
// reservation it holds there, or, where a report already covers it, its required
// rate, which the report counts as used if the pod uses it; and its guarantee. Once
// the victim is gone the ledger credits the node with the same until a report shows
// it gone (see Ledger.ForgetDeleted), so the preemptor finds the room preemption made.
func (pl *BandwidthAware) RemovePod(_ context.Context, state fwk.CycleState, podToSchedule *v1.Pod, victim fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	return pl.adjust(state, podToSchedule, victim.GetPod(), nodeInfo, 1)
}

// AddPod puts the pod's bandwidth back on the node (a victim reprieved), or adds that
// of a nominated pod the ledger does not hold yet: its required rates.
func (pl *BandwidthAware) AddPod(_ context.Context, state fwk.CycleState, podToSchedule *v1.Pod, added fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	return pl.adjust(state, podToSchedule, added.GetPod(), nodeInfo, -1)
}

// adjust writes into state a copy of the pod's cycle state with other's bandwidth on
// the node taken off (sign 1) or put on (sign -1).
func (pl *BandwidthAware) adjust(state fwk.CycleState, pod, other *v1.Pod, nodeInfo fwk.NodeInfo, sign int64) *fwk.Status {
	s, ok := readPodState(state)
	if !ok || !s.req.HasRequired() || !annotations.HasBandwidth(other.Annotations) {
		return nil
	}
	node := nodeInfo.Node()
	if node == nil {
		return fwk.NewStatus(fwk.Error, "node not found")
	}
	c, ok := pl.ledger.Contribution(other, node.Name, networkOf(s.req))
	if !ok {
		return nil
	}
	next := *s
	a := nodeAdjust{node: node.Name}
	if s.adjust != nil && s.adjust.node == node.Name {
		a = *s.adjust
	}
	a.res.ingress += sign * c.ingress
	a.res.egress += sign * c.egress
	a.res.guaranteedIn += sign * c.guaranteedIn
	a.res.guaranteedEg += sign * c.guaranteedEg
	next.adjust = &a
	state.Write(stateKey, &next)
	return nil
}
