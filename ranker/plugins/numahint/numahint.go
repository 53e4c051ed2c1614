// Package numahint is how a plugin that hands out NUMA-bound resources other than CPU and
// memory tells NUMAAware about them, so that one NUMA decision covers every resource of a
// pod, as the kubelet's Topology Manager merges the hints of its CPU, memory and device
// managers. DeviceAware is today's only provider: it reports what each NUMA node of a
// node has free of every device kind, NUMAAware chooses the set of NUMA nodes, and
// DeviceAware picks the devices inside that set. Neither recomputes the other's part.
//
// Providers and NUMAAware meet through a Registry keyed by the scheduling profile's
// framework handle, because the framework builds plugins one by one and gives none of
// them a reference to another. Within a cycle, a provider reads NUMAAware's choice for
// the pod from the CycleState (Chosen, Reserved), where NUMAAware keeps a Choice under
// StateKey. This package is the only place the two plugins meet: neither imports the
// other.
package numahint

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/v1alpha1"
)

// Kinds is how many device kinds a pod can request; Counts are indexed like
// v1alpha1.RequestableDeviceKinds.
const Kinds = len(v1alpha1.RequestableDeviceKinds)

// Counts is a number of devices of each requestable kind.
type Counts [Kinds]int64

// IsZero reports whether c counts no device.
func (c Counts) IsZero() bool { return c == Counts{} }

// Provider reports a pod's demand for, and a node's free supply of, NUMA-bound devices.
type Provider interface {
	// Want is how many devices of each kind the pod asks for.
	Want(pod *v1.Pod) Counts
	// Free is what the node has free per NUMA node (by NUMA node ID) and, apart, what
	// it has free whose NUMA node is unknown, which fits any set. ok is false when the
	// provider knows nothing of the node.
	Free(nodeInfo fwk.NodeInfo) (byNUMA map[int32]Counts, unknown Counts, ok bool)
}

// Registry ties providers to the profile they belong to.
type Registry struct {
	mu        sync.Mutex
	providers map[fwk.Handle]Provider
}

// Default is the registry the plugin factories use.
var Default = &Registry{}

// Register makes p the provider of the profile whose handle is h.
func (r *Registry) Register(h fwk.Handle, p Provider) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.providers == nil {
		r.providers = map[fwk.Handle]Provider{}
	}
	r.providers[h] = p
}

// Lookup returns the provider of the profile whose handle is h, nil when it has none.
// Call it once all plugins of the profile are built (from PreFilter, not from a
// factory): the framework builds them in an order no plugin controls.
func (r *Registry) Lookup(h fwk.Handle) Provider {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.providers[h]
}

// StateKey is where NUMAAware keeps its CycleState entry for the pod, which implements
// Choice.
const StateKey fwk.StateKey = "sextant.io/numa-choice"

// Choice is NUMAAware's decision for the pod in one scheduling cycle.
type Choice interface {
	fwk.StateData
	// Chosen is the NUMA node IDs NUMAAware chooses for the pod on the node, if it
	// chooses any (the pod asks for CPU or memory and the node has a NodeTopology the
	// request fits): what Reserve took once it ran, else the choice Filter and Score make
	// from nodeInfo. The result is shared: do not modify it.
	Chosen(nodeInfo fwk.NodeInfo) ([]int32, bool)
	// Reserved is the NUMA node IDs Reserve took for the pod on node, if it took any.
	Reserved(node string) ([]int32, bool)
}

// readChoice returns NUMAAware's entry in state, nil when NUMAAware has not run for the
// pod (it is not in the profile, or the pod asks for nothing it decides).
func readChoice(state fwk.CycleState) Choice {
	if state == nil {
		return nil
	}
	d, err := state.Read(StateKey)
	if err != nil {
		return nil
	}
	c, _ := d.(Choice)
	return c
}

// Chosen is Choice.Chosen of NUMAAware's entry in state; false without one. DeviceAware
// uses it to prefer devices on those NUMA nodes.
func Chosen(state fwk.CycleState, nodeInfo fwk.NodeInfo) ([]int32, bool) {
	if c := readChoice(state); c != nil {
		return c.Chosen(nodeInfo)
	}
	return nil, false
}

// Reserved is Choice.Reserved of NUMAAware's entry in state; false without one.
func Reserved(state fwk.CycleState, node string) ([]int32, bool) {
	if c := readChoice(state); c != nil {
		return c.Reserved(node)
	}
	return nil, false
}

// PodUpdateHint is the queueing hint both NUMAAware and DeviceAware give pod updates: it
// requeues a rejected pod when it was itself updated (a fixed annotation) or when a pod
// on a node finished (its NUMA capacity and devices are free again), and not for the
// stream of other pod status updates.
func PodUpdateHint(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	updated, ok := newObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, nil
	}
	if updated.UID == pod.UID {
		return fwk.Queue, nil
	}
	old, _ := oldObj.(*v1.Pod)
	if updated.Spec.NodeName != "" && terminal(updated) && (old == nil || !terminal(old)) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

func terminal(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
}
