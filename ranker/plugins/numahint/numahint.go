// Package numahint is how a plugin that hands out NUMA-bound resources other than CPU and
// memory tells NUMAAware about them, so that one NUMA decision covers every resource of a
// pod, as the kubelet's Topology Manager merges the hints of its CPU, memory and device
// managers. DeviceAware is today's only provider: it reports what each NUMA node of a
// node has free of every device kind, NUMAAware chooses the set of NUMA nodes, and
// DeviceAware picks the devices inside that set. Neither recomputes the other's part.
//
// Providers and NUMAAware meet through a Registry keyed by the scheduling profile's
// framework handle, because the framework builds plugins one by one and gives none of
// them a reference to another.
package numahint

import (
	"sync"

	v1 "k8s.io/api/core/v1"
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
