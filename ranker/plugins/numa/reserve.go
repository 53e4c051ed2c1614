package numa

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/ranker/plugins/binder"
)

// Reserve holds the chosen NUMA capacity for the pod until its annotation is visible, so
// pods scheduled meanwhile see it taken, and stages the annotation for SextantBinder. When Filter recorded no choice for the node (it
// was not evaluated on this state), the choice is computed from the scheduler's snapshot.
func (pl *NUMAAware) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	s, ok := readState(state)
	if !ok || s.req.IsZero() {
		return nil
	}
	ch, ok := s.choices.get(nodeName)
	if !ok {
		topo := pl.topologies.Topology(nodeName)
		if !hasNUMA(topo) {
			return nil // nothing to reserve or write: NUMA is unknown on this node
		}
		if pl.nodeInfos == nil {
			return fwk.AsStatus(fmt.Errorf("numa reserve on node %s: no node lookup configured", nodeName))
		}
		nodeInfo, err := pl.nodeInfos(nodeName)
		if err != nil {
			return fwk.AsStatus(fmt.Errorf("numa reserve: look up node %s: %w", nodeName, err))
		}
		if ch, ok = BestChoice(topo, pl.free(topo, nodeInfo), s.req); !ok {
			filterRejections.WithLabelValues(reasonNoFit).Inc()
			return fwk.NewStatus(fwk.Unschedulable, msgNoFit)
		}
		if s.policy == PolicySingleNUMANode && len(ch.Nodes) > 1 {
			filterRejections.WithLabelValues(reasonSingleNUMANode).Inc()
			return fwk.NewStatus(fwk.Unschedulable, msgSingleNUMANode)
		}
		s.choices.set(nodeName, ch)
	}
	pl.ledger.reserve(pod.UID, reservation{node: nodeName, nodes: ch.Nodes, req: s.req})
	binder.Stage(state, NodesAnnotation, FormatNodes(ch.Nodes))
	return nil
}

// Unreserve releases the pod's reservation and what it staged for the Binding. It is
// idempotent.
func (pl *NUMAAware) Unreserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ string) {
	pl.ledger.forget(pod.UID)
	binder.Unstage(state, NodesAnnotation)
}
