// Package dratest is a SharedDRAManager over objects held in memory, for tests of
// plugins that read DRA claims, slices and classes the way kube-scheduler's
// DynamicResources does.
package dratest

import (
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingapi "k8s.io/api/scheduling/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"
)

// Manager holds claims, slices and classes; Pending stands for allocations in flight.
type Manager struct {
	mu      sync.Mutex
	Claims  []*resourceapi.ResourceClaim
	Slices  []*resourceapi.ResourceSlice
	Classes []*resourceapi.DeviceClass
	Pending map[types.UID]*resourceapi.AllocationResult
	// Extended maps extended resources to DeviceClasses (KEP-5004).
	Extended map[v1.ResourceName]*resourceapi.DeviceClass
}

var (
	_ fwk.SharedDRAManager     = &Manager{}
	_ fwk.ResourceClaimTracker = tracker{}
)

func (m *Manager) ResourceClaims() fwk.ResourceClaimTracker     { return tracker{m} }
func (m *Manager) ResourceSlices() fwk.ResourceSliceLister      { return sliceLister{m} }
func (m *Manager) DeviceClasses() fwk.DeviceClassLister         { return classLister{m} }
func (m *Manager) DeviceClassResolver() fwk.DeviceClassResolver { return resolver{m} }
func (m *Manager) PodGroups() fwk.PodGroupLister                { return podGroups{} }

type tracker struct{ m *Manager }

func (t tracker) List() ([]*resourceapi.ResourceClaim, error) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	return append([]*resourceapi.ResourceClaim(nil), t.m.Claims...), nil
}

func (t tracker) Get(namespace, name string) (*resourceapi.ResourceClaim, error) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	for _, c := range t.m.Claims {
		if c.Namespace == namespace && c.Name == name {
			return c, nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
}

func (t tracker) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	out := sets.New[structured.DeviceID]()
	add := func(a *resourceapi.AllocationResult) {
		for _, r := range a.Devices.Results {
			out.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	for _, c := range t.m.Claims {
		if c.Status.Allocation != nil {
			add(c.Status.Allocation)
		}
	}
	for _, a := range t.m.Pending {
		add(a)
	}
	return out, nil
}

func (t tracker) GatherAllocatedState() (*structured.AllocatedState, error) {
	devs, _ := t.ListAllAllocatedDevices()
	return &structured.AllocatedState{
		AllocatedDevices:         devs,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}, nil
}

func (t tracker) SignalClaimPendingAllocation(uid types.UID, c *resourceapi.ResourceClaim) error {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	if t.m.Pending == nil {
		t.m.Pending = map[types.UID]*resourceapi.AllocationResult{}
	}
	t.m.Pending[uid] = c.Status.Allocation
	return nil
}

func (t tracker) GetPendingAllocation(uid types.UID) *resourceapi.AllocationResult {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	return t.m.Pending[uid]
}

func (t tracker) MaybeRemoveClaimPendingAllocation(uid types.UID, _ bool) bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	_, ok := t.m.Pending[uid]
	delete(t.m.Pending, uid)
	return ok
}

func (t tracker) AssumeClaimAfterAPICall(*resourceapi.ResourceClaim) error { return nil }
func (t tracker) AssumedClaimRestore(string, string)                       {}

type sliceLister struct{ m *Manager }

func (l sliceLister) ListWithDeviceTaintRules() ([]*resourceapi.ResourceSlice, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return append([]*resourceapi.ResourceSlice(nil), l.m.Slices...), nil
}

type classLister struct{ m *Manager }

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return append([]*resourceapi.DeviceClass(nil), l.m.Classes...), nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	for _, c := range l.m.Classes {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

type resolver struct{ m *Manager }

func (r resolver) GetDeviceClass(name v1.ResourceName) *resourceapi.DeviceClass {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	return r.m.Extended[name]
}

type podGroups struct{}

func (podGroups) Get(namespace, name string) (*schedulingapi.PodGroup, error) {
	return nil, fmt.Errorf("no pod group %s/%s", namespace, name)
}

// Device is a device of a slice: its name, NUMA node (nil: no numaNode attribute) and
// PCI address ("": none).
type Device struct {
	Name     string
	NUMANode *int64
	PCIBusID string
}

// Slice is the ResourceSlice of driver's pool on node holding devs.
func Slice(driver, node string, devs ...Device) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{}
	s.Name = driver + "-" + node
	s.Spec.Driver = driver
	s.Spec.NodeName = ptr.To(node)
	s.Spec.Pool = resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}
	for _, d := range devs {
		dev := resourceapi.Device{Name: d.Name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
		if d.NUMANode != nil {
			dev.Attributes["resource.kubernetes.io/numaNode"] = resourceapi.DeviceAttribute{IntValue: d.NUMANode}
		}
		if d.PCIBusID != "" {
			dev.Attributes["resource.kubernetes.io/pciBusID"] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.PCIBusID)}
		}
		s.Spec.Devices = append(s.Spec.Devices, dev)
	}
	return s
}

// Class is a DeviceClass selecting every device of driver.
func Class(name, driver string) *resourceapi.DeviceClass {
	c := &resourceapi.DeviceClass{}
	c.Name = name
	c.Spec.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}}}
	return c
}

// Claim is the claim namespace/name asking for count devices of class; sameNUMA adds a
// matchAttribute constraint on resource.kubernetes.io/numaNode.
func Claim(namespace, name, class string, count int64, sameNUMA bool) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{}
	c.Namespace, c.Name, c.UID = namespace, name, types.UID(namespace+"-"+name)
	c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "req", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}}
	if sameNUMA {
		c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("resource.kubernetes.io/numaNode"))}}
	}
	return c
}

// Allocated sets the claim's allocation to devices of driver's pool on node.
func Allocated(c *resourceapi.ResourceClaim, driver, node string, devices ...string) *resourceapi.ResourceClaim {
	c.Status.Allocation = Allocation(driver, node, devices...)
	return c
}

// Allocation is an allocation of devices of driver's pool on node.
func Allocation(driver, node string, devices ...string) *resourceapi.AllocationResult {
	a := &resourceapi.AllocationResult{}
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "req", Driver: driver, Pool: node, Device: d})
	}
	return a
}

// Pod is a pod using the claims by name.
func Pod(namespace, name string, claims ...string) *v1.Pod {
	p := &v1.Pod{}
	p.Namespace, p.Name, p.UID = namespace, name, types.UID(namespace+"-"+name)
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
	}
	return p
}
