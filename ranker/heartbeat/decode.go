package heartbeat

import (
	"errors"
	"fmt"
	"math"
	"time"

	"sextant.io/sextant/api/annotations"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"sextant.io/sextant/api/v1alpha1"
)

// Why a heartbeat object is rejected: the reason label of
// sextant_ranker_heartbeat_rejected_total.
const (
	// ReasonUndecodable: the object does not convert to its Go type, e.g. a window of
	// "soon" or a quantity of "1e.5", which a looser CRD schema (an older chart's) let
	// into etcd, where it stays across an upgrade.
	ReasonUndecodable = "undecodable"
	// ReasonOutOfRange: a figure the ranker cannot use although it decodes: a rate
	// beyond int64 bits/s or below zero, a negative window, more NUMA nodes, CPUs or
	// devices than the bounds (MaxNUMANodes, MaxCPUs, MaxDevices).
	ReasonOutOfRange = "out_of_range"
	// ReasonInconsistent: parts that contradict each other: a remaining above its
	// capacity or without one, a NUMA node or CPU listed twice, a healthy device on a
	// NUMA node the topology lacks.
	ReasonInconsistent = "inconsistent"
)

// The bounds of one node's topology, as the CRD states them (api/v1alpha1): Linux's
// MAX_NUMNODES and NR_CPUS, and a generous count of PCI functions. The CRD bounds each
// list; the ranker also bounds the CPUs of all NUMA nodes together, which the schema
// cannot.
const (
	MaxNUMANodes = 1024
	MaxCPUs      = 8192
	MaxDevices   = 4096
)

// Rejection is why a heartbeat object cannot be used: its node counts as having no
// report of that kind.
type Rejection struct {
	Reason string
	Err    error
}

func (r *Rejection) Error() string { return r.Reason + ": " + r.Err.Error() }

func (r *Rejection) Unwrap() error { return r.Err }

func reject(reason, format string, args ...any) error {
	return &Rejection{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ReasonOf is the rejection reason of err, ReasonUndecodable when err is not a
// Rejection.
func ReasonOf(err error) string {
	var r *Rejection
	if errors.As(err, &r) {
		return r.Reason
	}
	return ReasonUndecodable
}

// Rejected stands, in the Store's informer, for a heartbeat object the ranker cannot
// use: it keeps the object's identity, so that the object's next version or deletion
// is followed as any other, and why it was rejected. Its node counts as having no
// report of that kind.
type Rejected struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Err error
}

// DeepCopyObject implements runtime.Object, which informers expect of what they hold.
func (r *Rejected) DeepCopyObject() runtime.Object {
	out := &Rejected{TypeMeta: r.TypeMeta, Err: r.Err}
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// Reason is the rejection's reason label.
func (r *Rejected) Reason() string { return ReasonOf(r.Err) }

// newRejected keeps what the informer and the logs need of u.
func newRejected(kind string, u *unstructured.Unstructured, err error) *Rejected {
	gv := v1alpha1.GroupVersion
	return &Rejected{
		TypeMeta:   metav1.TypeMeta{APIVersion: gv.String(), Kind: kind},
		ObjectMeta: identity(u),
		Err:        err,
	}
}

const (
	kindBandwidth = "NodeBandwidth"
	kindTopology  = "NodeTopology"
)

// DecodeBandwidth turns a NodeBandwidth as a watch delivers it into its Go type, and
// checks that the ranker can use it (ValidateBandwidth). The error is a *Rejection; it
// never panics, whatever the API server let through.
func DecodeBandwidth(u *unstructured.Unstructured) (*v1alpha1.NodeBandwidth, error) {
	out := &v1alpha1.NodeBandwidth{}
	if err := convert(u, out); err != nil {
		return nil, err
	}
	if err := ValidateBandwidth(out); err != nil {
		return nil, err
	}
	return out, nil
}

// DecodeTopology is DecodeBandwidth for a NodeTopology (ValidateTopology).
func DecodeTopology(u *unstructured.Unstructured) (*v1alpha1.NodeTopology, error) {
	out := &v1alpha1.NodeTopology{}
	if err := convert(u, out); err != nil {
		return nil, err
	}
	if err := ValidateTopology(out); err != nil {
		return nil, err
	}
	return out, nil
}

// convert decodes u into out, turning a panic of the converter into a rejection: the
// input comes from every agent's credentials, and a panic in an informer's goroutine
// would take the ranker down with it.
func convert(u *unstructured.Unstructured, out runtime.Object) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = reject(ReasonUndecodable, "decode %s %s: panic: %v", u.GetKind(), u.GetName(), p)
		}
	}()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return &Rejection{Reason: ReasonUndecodable, Err: fmt.Errorf("decode %s %s: %w", u.GetKind(), u.GetName(), err)}
	}
	return nil
}

// ValidateBandwidth reports why a decoded NodeBandwidth cannot be used, nil if it can.
// It checks every figure, not only the totals the plugins read: a report with one
// nonsensical figure is not trusted for the others.
func ValidateBandwidth(nbw *v1alpha1.NodeBandwidth) error {
	st := &nbw.Status
	if st.Window != nil && st.Window.Duration < 0 {
		return reject(ReasonOutOfRange, "window %s is negative", st.Window.Duration)
	}
	if n := len(st.Interfaces); n > v1alpha1.MaxInterfaces {
		return reject(ReasonOutOfRange, "%d interfaces, more than %d", n, v1alpha1.MaxInterfaces)
	}
	for i := range st.Interfaces {
		if err := validateBoth(&st.Interfaces[i].Bandwidth); err != nil {
			return fmt.Errorf("interface %q: %w", st.Interfaces[i].Name, err)
		}
	}
	if st.Total != nil {
		if err := validateBoth(st.Total); err != nil {
			return fmt.Errorf("total: %w", err)
		}
	}
	if n := len(st.Networks); n > v1alpha1.MaxNetworks {
		return reject(ReasonOutOfRange, "%d networks, more than %d", n, v1alpha1.MaxNetworks)
	}
	seen := make(map[string]bool, len(st.Networks))
	for i := range st.Networks {
		nw := &st.Networks[i]
		if !annotations.IsNetworkName(nw.Name) {
			return reject(ReasonOutOfRange, "network name %q is not a DNS label", nw.Name)
		}
		if seen[nw.Name] {
			return reject(ReasonInconsistent, "network %q is listed twice", nw.Name)
		}
		seen[nw.Name] = true
		if err := validateBoth(&nw.Bandwidth); err != nil {
			return fmt.Errorf("network %q: %w", nw.Name, err)
		}
		if g := nw.Guarantees; g != nil {
			for _, f := range [...]struct {
				name string
				q    *resource.Quantity
			}{{"ingress capacity", g.Ingress.Capacity}, {"ingress guaranteed", g.Ingress.Guaranteed},
				{"egress capacity", g.Egress.Capacity}, {"egress guaranteed", g.Egress.Guaranteed}} {
				if f.q == nil {
					continue
				}
				if _, ok := BitsPerSecond(f.q); !ok {
					return reject(ReasonOutOfRange, "network %q: guarantees' %s %s is not a rate of 0 to %d bits/s", nw.Name, f.name, f.q.String(), int64(math.MaxInt64))
				}
			}
		}
	}
	return nil
}

func validateBoth(b *v1alpha1.Bandwidth) error {
	if err := validateDirection(&b.Ingress); err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	if err := validateDirection(&b.Egress); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	return nil
}

func validateDirection(d *v1alpha1.DirectionBandwidth) error {
	for _, f := range [...]struct {
		name string
		q    *resource.Quantity
	}{{"capacity", d.Capacity}, {"rate", d.Rate}, {"peak", d.Peak}, {"remaining", d.Remaining}} {
		if f.q == nil {
			continue
		}
		if _, ok := BitsPerSecond(f.q); !ok {
			return reject(ReasonOutOfRange, "%s %s is not a rate of 0 to %d bits/s", f.name, f.q.String(), int64(math.MaxInt64))
		}
	}
	if d.Remaining != nil {
		if d.Capacity == nil {
			return reject(ReasonInconsistent, "remaining %s without a capacity", d.Remaining.String())
		}
		if d.Remaining.Cmp(*d.Capacity) > 0 {
			return reject(ReasonInconsistent, "remaining %s above capacity %s", d.Remaining.String(), d.Capacity.String())
		}
	}
	return nil
}

// BitsPerSecond is q as whole bits per second (a fraction rounds up, as
// Quantity.Value does); ok is false for a negative q or one beyond int64.
func BitsPerSecond(q *resource.Quantity) (int64, bool) {
	if q.Sign() < 0 || q.CmpInt64(math.MaxInt64) > 0 {
		return 0, false
	}
	v := q.Value()
	// Value rounds a fraction up, which can carry the largest quantities past int64.
	return v, v >= 0
}

// ValidateTopology reports why a decoded NodeTopology cannot be used, nil if it can.
// The plugins index by NUMA node and count CPUs: a NUMA node or CPU listed twice would
// count its capacity twice, and a healthy device on a NUMA node the topology lacks has
// no place in a choice of NUMA nodes.
func ValidateTopology(nt *v1alpha1.NodeTopology) error {
	t := &nt.Status.Topology
	if n := len(t.NUMANodes); n > MaxNUMANodes {
		return reject(ReasonOutOfRange, "%d NUMA nodes, more than %d", n, MaxNUMANodes)
	}
	if n := len(t.PCIDevices); n > MaxDevices {
		return reject(ReasonOutOfRange, "%d PCI devices, more than %d", n, MaxDevices)
	}
	if n := len(t.NICs); n > MaxDevices {
		return reject(ReasonOutOfRange, "%d NICs, more than %d", n, MaxDevices)
	}
	var numa [MaxNUMANodes]bool
	var cpus [MaxCPUs]bool
	total, memory := 0, int64(0)
	for _, n := range t.NUMANodes {
		if n.ID < 0 || n.ID >= MaxNUMANodes {
			return reject(ReasonOutOfRange, "NUMA node ID %d outside 0-%d", n.ID, MaxNUMANodes-1)
		}
		if numa[n.ID] {
			return reject(ReasonInconsistent, "NUMA node %d listed twice", n.ID)
		}
		numa[n.ID] = true
		if n.MemoryBytes < 0 || n.MemoryBytes > math.MaxInt64-memory {
			return reject(ReasonOutOfRange, "NUMA node %d: memory %d bytes negative or beyond int64 in all", n.ID, n.MemoryBytes)
		}
		memory += n.MemoryBytes
		if total += len(n.CPUs); total > MaxCPUs {
			return reject(ReasonOutOfRange, "more than %d CPUs", MaxCPUs)
		}
		for _, c := range n.CPUs {
			if c < 0 || c >= MaxCPUs {
				return reject(ReasonOutOfRange, "NUMA node %d: CPU %d outside 0-%d", n.ID, c, MaxCPUs-1)
			}
			if cpus[c] {
				return reject(ReasonInconsistent, "CPU %d listed twice", c)
			}
			cpus[c] = true
		}
		if len(n.Distances) > MaxNUMANodes {
			return reject(ReasonOutOfRange, "NUMA node %d: %d distances, more than %d", n.ID, len(n.Distances), MaxNUMANodes)
		}
		for _, d := range n.Distances {
			if d < 0 || d > 255 {
				return reject(ReasonOutOfRange, "NUMA node %d: distance %d outside 0-255", n.ID, d)
			}
		}
	}
	addresses := make(map[string]struct{}, len(t.PCIDevices))
	for _, d := range t.PCIDevices {
		if _, dup := addresses[d.Address]; dup {
			return reject(ReasonInconsistent, "PCI device %s listed twice", d.Address)
		}
		addresses[d.Address] = struct{}{}
		if d.NUMANode == nil {
			continue
		}
		if *d.NUMANode < 0 || *d.NUMANode >= MaxNUMANodes {
			return reject(ReasonOutOfRange, "PCI device %s on NUMA node %d, outside 0-%d", d.Address, *d.NUMANode, MaxNUMANodes-1)
		}
		// A vanished device stays listed, Unhealthy, with the NUMA node it had, which
		// may be gone too (the agent seeds them from its previous NodeTopology); no
		// plugin places a pod on it. A healthy one the agent read just now.
		if d.Health == v1alpha1.Healthy && !numa[*d.NUMANode] {
			return reject(ReasonInconsistent, "healthy PCI device %s on NUMA node %d, which the topology lacks", d.Address, *d.NUMANode)
		}
	}
	return nil
}

// identity is what an informer needs of an object's metadata: its key and version.
func identity(u *unstructured.Unstructured) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            u.GetName(),
		Namespace:       u.GetNamespace(),
		UID:             u.GetUID(),
		ResourceVersion: u.GetResourceVersion(),
		Generation:      u.GetGeneration(),
	}
}

// lastStatusWrite is when the API server last recorded a change to u's status (its
// managed fields' times, on the API server's clock), zero if it recorded none.
func lastStatusWrite(u *unstructured.Unstructured) time.Time {
	var last time.Time
	for _, e := range u.GetManagedFields() {
		if e.Subresource == "status" && e.Time != nil && e.Time.After(last) {
			last = e.Time.Time
		}
	}
	return last
}
