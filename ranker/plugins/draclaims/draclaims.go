// Package draclaims tells NUMAAware where a pod's DRA devices are, or will be, on a
// node: the devices of claims already allocated, and of claims kube-scheduler's
// DynamicResources plugin is about to allocate, predicted by running the same
// structured allocator on the same inputs. A device's NUMA node is its
// resource.kubernetes.io/numaNode attribute or, for a driver that publishes only
// resource.kubernetes.io/pciBusID, the NUMA node the node's NodeTopology gives that PCI
// address. docs/design/0075-dra-devices-in-the-numa-decision.md says why the NUMA
// decision follows DynamicResources' allocation instead of steering it.
package draclaims

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/v1alpha1"
)

// The standard attributes a device's NUMA node is read from.
const (
	NUMANodeAttribute resourceapi.QualifiedName = "resource.kubernetes.io/numaNode"
	PCIBusIDAttribute resourceapi.QualifiedName = "resource.kubernetes.io/pciBusID"
)

// Allocator is what a Predictor needs of the DRA plumbing: the profile's DRA manager
// and the allocator's features and CEL cache, as DynamicResources has them, and the
// slices' grouping by pool kept across pods (nil: grouped anew for each pod).
type Allocator struct {
	Manager  fwk.SharedDRAManager
	Features structured.Features
	CEL      *cel.Cache
	Slices   *SliceIndex
}

// location is where a device sits, as its slice says.
type location struct {
	numaNode *int32
	pciBusID string
}

// Predictor is one pod's claims in one scheduling cycle.
type Predictor struct {
	// fixed are the devices of claims allocated before this cycle, or whose allocation
	// is in flight for another pod sharing them.
	fixed []structured.DeviceID
	// toAllocate are the claims DynamicResources allocates in this cycle.
	toAllocate []*resourceapi.ResourceClaim
	// extended are the pod's extended resources that map to a DeviceClass: on a node
	// whose allocatable has none of one, DynamicResources allocates it through a claim
	// of its own (KEP-5004).
	extended  []extendedRequest
	namespace string
	allocator structured.Allocator
	// pools are the cycle's slices by driver and pool: a device's attributes are looked
	// up there for the few devices a placement names.
	pools map[poolID][]*resourceapi.ResourceSlice
}

// poolID names one driver's pool.
type poolID struct{ driver, pool string }

// extendedRequest is count devices of class for the extended resource name.
type extendedRequest struct {
	name  v1.ResourceName
	class string
	count int64
}

// BackedByDRA reports whether node gets the extended resource name through DRA, as
// kube-scheduler decides it: the resource maps to a DeviceClass and the node's
// allocatable has none of it (no device plugin serves it there).
func BackedByDRA(resolver fwk.DeviceClassResolver, node *v1.Node, name v1.ResourceName) bool {
	if resolver == nil || node == nil || resolver.GetDeviceClass(name) == nil {
		return false
	}
	q, ok := node.Status.Allocatable[name]
	return !ok || q.IsZero()
}

// HasClaims reports whether the pod names ResourceClaims (its own or from templates).
func HasClaims(pod *v1.Pod) bool { return len(pod.Spec.ResourceClaims) > 0 }

// Mapped are the resources of extended (the pod's extended resource requests) that map
// to a DeviceClass: those some node may give the pod through DRA.
func (a Allocator) Mapped(extended map[v1.ResourceName]int64) []v1.ResourceName {
	if a.Manager == nil {
		return nil
	}
	var out []v1.ResourceName
	for name, n := range extended {
		if n > 0 && a.Manager.DeviceClassResolver().GetDeviceClass(name) != nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// New reads the pod's claims and, if some are to be allocated, builds the allocator as
// DynamicResources' PreFilter does; extended are the pod's extended resource requests
// that map to a DeviceClass (Mapped). A claim that does not exist yet (its template's
// is being made) is an error: DynamicResources keeps such a pod from being scheduled.
func (a Allocator) New(ctx context.Context, pod *v1.Pod, extended map[v1.ResourceName]int64) (*Predictor, error) {
	if a.Manager == nil {
		return nil, errors.New("no DRA manager")
	}
	tracker := a.Manager.ResourceClaims()
	p := &Predictor{namespace: pod.Namespace}
	for _, name := range a.Mapped(extended) {
		class := a.Manager.DeviceClassResolver().GetDeviceClass(name)
		p.extended = append(p.extended, extendedRequest{name: name, class: class.Name, count: extended[name]})
	}
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return nil, err
		}
		if name == nil {
			continue // the template made no claim for this pod: nothing to place
		}
		claim, err := tracker.Get(pod.Namespace, *name)
		if err != nil {
			return nil, fmt.Errorf("resource claim %s/%s: %w", pod.Namespace, *name, err)
		}
		alloc := claim.Status.Allocation
		if alloc == nil {
			alloc = tracker.GetPendingAllocation(claim.UID)
		}
		if alloc != nil {
			p.fixed = append(p.fixed, results(alloc)...)
			continue
		}
		p.toAllocate = append(p.toAllocate, claim)
	}
	all, err := a.Manager.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, fmt.Errorf("listing resource slices: %w", err)
	}
	p.pools = a.Slices.byPool(all)
	if len(p.toAllocate) == 0 && len(p.extended) == 0 {
		return p, nil
	}
	state, err := a.allocatedState(tracker)
	if err != nil {
		return nil, err
	}
	p.allocator, err = structured.NewAllocator(ctx, a.Features, *state, a.Manager.DeviceClasses(), all, a.CEL)
	if err != nil {
		return nil, fmt.Errorf("building the DRA allocator: %w", err)
	}
	return p, nil
}

// allocatedState is what the allocator counts as taken, gathered as DynamicResources
// gathers it.
func (a Allocator) allocatedState(tracker fwk.ResourceClaimTracker) (*structured.AllocatedState, error) {
	if a.Features.ConsumableCapacity {
		s, err := tracker.GatherAllocatedState()
		if err != nil {
			return nil, fmt.Errorf("gathering allocated devices: %w", err)
		}
		if s == nil {
			return nil, errors.New("gathering allocated devices: nil state")
		}
		return s, nil
	}
	devs, err := tracker.ListAllAllocatedDevices()
	if err != nil {
		return nil, fmt.Errorf("listing allocated devices: %w", err)
	}
	return &structured.AllocatedState{
		AllocatedDevices:         devs,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}, nil
}

// Devices are the pod's devices if it goes to node: the fixed ones and those the
// allocator picks there. ok is false when the claims cannot be allocated on the node,
// which DynamicResources' Filter rejects anyway.
func (p *Predictor) Devices(ctx context.Context, node *v1.Node, resolver fwk.DeviceClassResolver) (devs []structured.DeviceID, ok bool, err error) {
	devs = p.fixed
	claims := p.toAllocate
	if ext := p.extendedClaim(node, resolver); ext != nil {
		claims = append(slices.Clip(claims), ext)
	}
	if p.allocator == nil || len(claims) == 0 {
		return devs, true, nil
	}
	allocs, err := p.allocator.Allocate(ctx, node, claims)
	if err != nil {
		if errors.Is(err, structured.ErrFailedAllocationOnNode) {
			return nil, false, nil
		}
		return nil, false, err
	}
	if len(allocs) != len(claims) {
		return nil, false, nil
	}
	devs = append([]structured.DeviceID(nil), devs...)
	for i := range allocs {
		devs = append(devs, results(&allocs[i])...)
	}
	return devs, true, nil
}

// extendedClaim is the claim DynamicResources makes on node for the pod's extended
// resources the node gets through DRA: one request per resource, of the pod's count
// (the first-fit devices of one request of n are those of several requests adding up
// to n); nil when the node gets none through DRA.
func (p *Predictor) extendedClaim(node *v1.Node, resolver fwk.DeviceClassResolver) *resourceapi.ResourceClaim {
	var c *resourceapi.ResourceClaim
	for i, e := range p.extended {
		if !BackedByDRA(resolver, node, e.name) {
			continue
		}
		if c == nil {
			c = &resourceapi.ResourceClaim{}
			c.Namespace, c.Name = p.namespace, "extended-resources"
		}
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: fmt.Sprintf("extended-%d", i),
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: e.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: e.count,
			},
		})
	}
	return c
}

// Allocated are the devices DynamicResources holds for the pod now: the claims'
// allocations, or those in flight since its Reserve. ok is false while a claim has
// neither.
func (a Allocator) Allocated(pod *v1.Pod) (devs []structured.DeviceID, ok bool, err error) {
	tracker := a.Manager.ResourceClaims()
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return nil, false, err
		}
		if name == nil {
			continue
		}
		claim, err := tracker.Get(pod.Namespace, *name)
		if err != nil {
			return nil, false, fmt.Errorf("resource claim %s/%s: %w", pod.Namespace, *name, err)
		}
		alloc := tracker.GetPendingAllocation(claim.UID)
		if alloc == nil {
			alloc = claim.Status.Allocation
		}
		if alloc == nil {
			return nil, false, nil
		}
		devs = append(devs, results(alloc)...)
	}
	return devs, true, nil
}

// NUMANodes are the NUMA nodes of devs on a node whose topology is topo, each once in
// ascending order, and how many of devs have no known NUMA node (no attribute, and no
// PCI address the topology places).
func (p *Predictor) NUMANodes(devs []structured.DeviceID, topo *v1alpha1.NodeTopology) (ids []int32, unknown int) {
	return numaNodes(p.pools, devs, topo)
}

// NUMANodes is Predictor.NUMANodes for devices read back after the allocation
// (Allocated), with the slices as listed now.
func (a Allocator) NUMANodes(devs []structured.DeviceID, topo *v1alpha1.NodeTopology) (ids []int32, unknown int, err error) {
	if a.Manager == nil {
		return nil, 0, errors.New("no DRA manager")
	}
	all, err := a.Manager.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		return nil, 0, fmt.Errorf("listing resource slices: %w", err)
	}
	ids, unknown = numaNodes(a.Slices.byPool(all), devs, topo)
	return ids, unknown, nil
}

func numaNodes(pools map[poolID][]*resourceapi.ResourceSlice, devs []structured.DeviceID, topo *v1alpha1.NodeTopology) (ids []int32, unknown int) {
	for _, d := range devs {
		loc := locate(pools, d)
		id := loc.numaNode
		if id == nil && loc.pciBusID != "" && topo != nil {
			for i := range topo.Status.PCIDevices {
				if topo.Status.PCIDevices[i].Address == loc.pciBusID {
					id = topo.Status.PCIDevices[i].NUMANode
					break
				}
			}
		}
		if id == nil {
			unknown++
			continue
		}
		ids = insertSorted(ids, *id)
	}
	return ids, unknown
}

func insertSorted(ids []int32, id int32) []int32 {
	for i, x := range ids {
		if x == id {
			return ids
		}
		if x > id {
			ids = append(ids, 0)
			copy(ids[i+1:], ids[i:])
			ids[i] = id
			return ids
		}
	}
	return append(ids, id)
}

func results(a *resourceapi.AllocationResult) []structured.DeviceID {
	out := make([]structured.DeviceID, 0, len(a.Devices.Results))
	for _, r := range a.Devices.Results {
		out = append(out, structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
	}
	return out
}

// locate reads where device d sits from its slice's attributes: its NUMA node and PCI
// address, where the driver publishes them.
func locate(pools map[poolID][]*resourceapi.ResourceSlice, d structured.DeviceID) location {
	var loc location
	for _, s := range pools[poolID{d.Driver.String(), d.Pool.String()}] {
		for i := range s.Spec.Devices {
			dev := &s.Spec.Devices[i]
			if dev.Name != d.Device.String() {
				continue
			}
			if a, ok := dev.Attributes[NUMANodeAttribute]; ok && a.IntValue != nil && *a.IntValue >= 0 && *a.IntValue < 1024 {
				id := int32(*a.IntValue)
				loc.numaNode = &id
			}
			if a, ok := dev.Attributes[PCIBusIDAttribute]; ok && a.StringValue != nil {
				loc.pciBusID = *a.StringValue
			}
			return loc
		}
	}
	return loc
}
