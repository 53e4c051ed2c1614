package numa

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/draclaims"
)

// PreFilter computes the pod's CPU and memory request and parses its policy once per
// cycle. A malformed policy leaves the pod Pending (UnschedulableAndUnresolvable, the
// message names the annotation and the accepted form); a pod asking for neither CPU nor
// memory skips NUMAAware's Filter, and so does one that fits one NUMA node of every
// node or, without a policy, all NUMA nodes of every node together (see floor). Short
// of that, Filter passes at once the nodes the spare floor holds for (see spare).
func (pl *NUMAAware) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	policy, err := annotations.PodNUMAPolicy(pod.Annotations)
	if err != nil {
		filterRejections.WithLabelValues(reasonMalformedPolicy).Inc()
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	s := &cycleState{req: PodRequest(pod), policy: policy, pl: pl, topologyVersion: pl.nodes.TopologyVersion()}
	if dp := pl.deviceProvider(); dp != nil {
		s.req.Devices = dp.Want(pod)
	}
	extended := map[v1.ResourceName]int64{}
	for k, n := range s.req.Devices {
		extended[v1alpha1.RequestableDeviceKinds[k].ResourceName()] = n
	}
	switch {
	case pl.dra.Manager == nil || !draclaims.HasClaims(pod) && len(pl.dra.Mapped(extended)) == 0:
	case policy == annotations.PolicyNone && s.req.Devices.IsZero():
		// Without a policy a node holds the pod whatever NUMA nodes its devices sit on
		// (the set may grow to all of them): the devices decide only the set on the
		// chosen node, which Reserve reads from DynamicResources' allocation, at no
		// cost per node. With device-plugin devices DeviceAware needs every node's set.
		s.claimsAtReserve = true
	default:
		// Every node is asked where DynamicResources would put the pod's devices:
		// neither the floor nor a zero request skips Filter.
		p, err := pl.dra.New(ctx, pod, extended)
		if err != nil {
			return nil, fwk.AsStatus(fmt.Errorf("numa prefilter: the pod's DRA claims: %w", err))
		}
		s.claims = &claims{predictor: p, resolver: pl.dra.Manager.DeviceClassResolver()}
		state.Write(stateKey, s)
		return nil, nil
	}
	state.Write(stateKey, s)
	if s.req.IsZero() {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	// Filter would pass every node: those without NodeTopology too, unless the policy
	// is single-numa-node (then it drops them and nodes that do not pin); PreScore
	// looks for them among the feasible nodes.
	one, together, bare, unpinned := pl.fitsFloor(s.req, nodes)
	if one && (s.policy == annotations.PolicyNone || len(bare) == 0 && !unpinned) {
		s.bare = bare
		return nil, fwk.NewStatus(fwk.Skip)
	}
	// Without a policy, Filter would also pass every node whose NUMA nodes together hold
	// the pod; whether some need more than one is then Score's to find out.
	if together && s.policy == annotations.PolicyNone {
		s.uneven.Store(true)
		return nil, fwk.NewStatus(fwk.Skip)
	}
	// Short of that, Filter passes the nodes the spare floor holds for without a look.
	// It counts no devices.
	if !s.req.Devices.IsZero() {
		return nil, nil
	}
	if sp := pl.spareFor(nodes); sp != nil {
		switch {
		case s.req.within(sp.one):
			s.fast = &fastPath{gen: sp.gen, low: sp.lowOne, one: true}
		case s.policy == annotations.PolicyNone && s.req.within(sp.together):
			s.fast = &fastPath{gen: sp.gen, low: sp.lowTogether}
			s.uneven.Store(true)
		}
	}
	return nil, nil
}

// PreFilterExtensions returns nil: Filter reads the pods of the NodeInfo it is given, so
// preemption's added and removed pods are already accounted for; the devices the
// NodeTopology still names them as holders of, the device provider's extensions track
// (simulatedDevices).
func (pl *NUMAAware) PreFilterExtensions() fwk.PreFilterExtensions { return nil }
