package numa

import (
	"context"
	"fmt"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/cel"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/draclaims"
)

// The messages of a node refused for a pod's DRA devices.
const (
	msgDRASpread  = Name + ": the pod's DRA devices would sit on more than one NUMA node (numa.sextant.io/policy single-numa-node)"
	msgDRAUnknown = Name + ": a DRA device for the pod has no known NUMA node (no resource.kubernetes.io/numaNode, no pciBusID in the node's NodeTopology) and the pod's policy is single-numa-node"
)

// draAllocator is the profile's DRA plumbing as DynamicResources has it: the same
// features, from the same feature gates, and a CEL cache of the same size; and the
// plugin's own grouping of the slices, kept from pod to pod.
func draAllocator(h fwk.Handle) draclaims.Allocator {
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	return draclaims.Allocator{
		Manager:  h.SharedDRAManager(),
		Features: dynamicresources.AllocatorFeatures(fts),
		CEL: cel.NewCache(10, cel.Features{
			EnableConsumableCapacity: fts.EnableDRAConsumableCapacity,
			EnableListTypeAttributes: fts.EnableDRAListTypeAttributes,
		}),
		Slices: &draclaims.SliceIndex{},
	}
}

// claimPlacement is where a pod's DRA devices would sit on one node.
type claimPlacement struct {
	// numa are the NUMA nodes of the devices, ascending; unknown counts devices of no
	// known NUMA node.
	numa    []int32
	unknown int
	// allocatable is false when DynamicResources cannot allocate the claims there.
	allocatable bool
}

// claims is a pod's DRA claims in one cycle: the prediction, and each node's placement
// once asked (Filter, Score, Reserve and DeviceAware ask for the same node).
type claims struct {
	predictor *draclaims.Predictor
	resolver  fwk.DeviceClassResolver
	mu        sync.Mutex
	byNode    map[string]claimPlacement
}

// placement is where the pod's devices would sit on node, whose topology is topo.
func (c *claims) placement(ctx context.Context, node *v1.Node, topo *v1alpha1.NodeTopology) (claimPlacement, error) {
	c.mu.Lock()
	p, ok := c.byNode[node.Name]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	devs, allocatable, err := c.predictor.Devices(ctx, node, c.resolver)
	if err != nil {
		return claimPlacement{}, err
	}
	p.allocatable = allocatable
	if allocatable {
		p.numa, p.unknown = c.predictor.NUMANodes(devs, topo)
	}
	c.mu.Lock()
	if c.byNode == nil {
		c.byNode = map[string]claimPlacement{}
	}
	c.byNode[node.Name] = p
	c.mu.Unlock()
	return p, nil
}

// choose is the pod's choice on the node: nf.choose, and for a pod with DRA claims the
// best set that holds the NUMA nodes its devices sit on. refusal is set when the node
// cannot take the pod for its devices (reason, message); a node DynamicResources
// cannot allocate on has no choice and no refusal, DynamicResources refuses it.
func (s *cycleState) choose(ctx context.Context, nf *nodeFree, topo *v1alpha1.NodeTopology, node *v1.Node) (ch Choice, ok bool, refusal *fwk.Status, err error) {
	if s.claims == nil {
		ch, ok = nf.choose(topo, s.req, s.policy)
		return ch, ok, nil, nil
	}
	if node == nil {
		return Choice{}, false, nil, nil
	}
	p, err := s.claims.placement(ctx, node, topo)
	if err != nil || !p.allocatable {
		return Choice{}, false, nil, err
	}
	single := s.policy == annotations.PolicySingleNUMANode
	if single && p.unknown > 0 {
		filterRejections.WithLabelValues(reasonDRAUnknown).Inc()
		return Choice{}, false, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgDRAUnknown), nil
	}
	if single && len(p.numa) > 1 {
		filterRejections.WithLabelValues(reasonDRASpread).Inc()
		return Choice{}, false, fwk.NewStatus(fwk.Unschedulable, msgDRASpread), nil
	}
	ch, ok, refusal = s.chooseHolding(nf, topo, node, p.numa)
	return ch, ok, refusal, nil
}

// chooseHolding is the best set on the node that holds the NUMA nodes numa (those of
// the pod's DRA devices) with the pod's CPUs and memory. Under single-numa-node a NUMA
// node the topology does not list is a refusal: the agent could not pin there.
func (s *cycleState) chooseHolding(nf *nodeFree, topo *v1alpha1.NodeTopology, node *v1.Node, numa []int32) (ch Choice, ok bool, refusal *fwk.Status) {
	free := nf.free()
	must := make([]int, 0, len(numa))
	for _, id := range numa {
		i := slices.IndexFunc(free, func(f Free) bool { return f.ID == id })
		if i < 0 {
			if s.policy == annotations.PolicySingleNUMANode {
				filterRejections.WithLabelValues(reasonDRAUnknown).Inc()
				return Choice{}, false, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgDRAUnknown)
			}
			continue
		}
		must = append(must, i)
	}
	ch, ok = choiceWith(free, nf.effective(s.reqOn(node), s.policy), must, lazyDistances{topo: topo, cache: &nf.dist})
	return ch, ok, nil
}

// chooseAtReserve is Reserve's choice for a pod whose claims wait for it
// (claimsAtReserve): the best set on the node that holds the NUMA nodes of the devices
// DynamicResources allocated the pod, read back after its Reserve. A device of no known
// NUMA node adds none; no policy asks more. Should no allocation be visible (only a
// profile that runs DynamicResources' Reserve after this one's), the devices are
// predicted on this one node instead, so the choice still holds them.
func (pl *NUMAAware) chooseAtReserve(ctx context.Context, s *cycleState, pod *v1.Pod, nf *nodeFree, topo *v1alpha1.NodeTopology, node *v1.Node) (Choice, bool, error) {
	devs, ok, err := pl.dra.Allocated(pod)
	if err != nil {
		return Choice{}, false, fmt.Errorf("numa reserve: reading the pod's DRA allocation: %w", err)
	}
	if !ok {
		pred, err := pl.dra.New(ctx, pod, nil)
		if err != nil {
			return Choice{}, false, fmt.Errorf("numa reserve: the pod's DRA claims: %w", err)
		}
		if devs, ok, err = pred.Devices(ctx, node, pl.dra.Manager.DeviceClassResolver()); err != nil || !ok {
			return Choice{}, false, err
		}
	}
	numa, _, err := pl.dra.NUMANodes(devs, topo)
	if err != nil {
		return Choice{}, false, fmt.Errorf("numa reserve: placing the pod's DRA devices: %w", err)
	}
	ch, ok, _ := s.chooseHolding(nf, topo, node, numa)
	return ch, ok, nil
}

// reqOn is the pod's request on node: device kinds the node gives through DRA
// (draclaims.BackedByDRA) are the prediction's to place, not the device plugin's.
func (s *cycleState) reqOn(node *v1.Node) Request {
	req := s.req
	if s.claims == nil || req.Devices.IsZero() {
		return req
	}
	for k, n := range req.Devices {
		if n > 0 && draclaims.BackedByDRA(s.claims.resolver, node, v1alpha1.RequestableDeviceKinds[k].ResourceName()) {
			req.Devices[k] = 0
		}
	}
	return req
}

// checkAllocated is Reserve's check that DynamicResources, whose Reserve ran before,
// allocated the pod's devices where the choice ch put the pod: on its NUMA nodes, or
// where the NUMA node is unknown, outside single-numa-node. A mismatch (the allocator's
// inputs changed between the two plugins' PreFilters) fails the cycle; the pod is
// retried on the state that changed.
func (pl *NUMAAware) checkAllocated(s *cycleState, pod *v1.Pod, topo *v1alpha1.NodeTopology, ch Choice) *fwk.Status {
	devs, ok, err := pl.dra.Allocated(pod)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("numa reserve: reading the pod's DRA allocation: %w", err))
	}
	if !ok {
		return nil // nothing allocated in this cycle: claims allocated earlier were predicted as they are
	}
	ids, unknown := s.claims.predictor.NUMANodes(devs, topo)
	if unknown > 0 && s.policy == annotations.PolicySingleNUMANode {
		filterRejections.WithLabelValues(reasonDRAUnknown).Inc()
		return fwk.NewStatus(fwk.Unschedulable, msgDRAUnknown)
	}
	for _, id := range ids {
		if !slices.Contains(ch.Nodes, id) {
			filterRejections.WithLabelValues(reasonDRAMoved).Inc()
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("%s: DynamicResources allocated the pod's devices on NUMA nodes %v, outside %v chosen for it; the pod is retried", Name, ids, ch.Nodes))
		}
	}
	return nil
}

// holds reports whether the sorted set holds every index of must.
func holds(set, must []int) bool {
	for _, m := range must {
		if _, ok := slices.BinarySearch(set, m); !ok {
			return false
		}
	}
	return true
}
