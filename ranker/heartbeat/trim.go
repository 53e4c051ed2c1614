package heartbeat

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"sextant.io/sextant/api/v1alpha1"
)

// The Store's transforms turn an informer's Unstructured into the typed object, or a
// Rejected, and never fail: a transform's error fails the informer's whole list or
// watch, which then retries forever without syncing.
//
// Managed fields are dropped: nothing in the ranker reads their field sets, and every
// node's copy would stay on the heap (docs/design/0006-one-heartbeat-record-per-node.md).
// Of a NodeBandwidth's, one entry
// without fields is kept: the time of the latest status write, which dates the reports
// listed at startup (see "Arrival").

func storeBandwidth(in any) (any, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return in, nil // tombstones and already-decoded objects pass through
	}
	// The informer hands the transform its own copy, decoded from the watch.
	written := lastStatusWrite(u)
	u.SetManagedFields(nil)
	full, err := DecodeBandwidth(u)
	if err != nil {
		return newRejected(kindBandwidth, u, err), nil
	}
	out := trimBandwidth(full)
	if !written.IsZero() {
		out.ManagedFields = []metav1.ManagedFieldsEntry{{Subresource: "status", Time: &metav1.Time{Time: written}}}
	}
	return out, nil
}

// trimBandwidth is the part of a checked NodeBandwidth that the ranker reads: its
// identity, sampleTime, window and each network's remaining (ParseBandwidth) with the
// capacity that bounds it (so the held object still passes ValidateBandwidth), whether
// its guarantees are enforced and their capacity, the total's only for a report without
// networks. The rest (per-interface figures, rates,
// peaks) would be held for every node and never read, and would make the heap grow
// with each interface an agent reports.
func trimBandwidth(nbw *v1alpha1.NodeBandwidth) *v1alpha1.NodeBandwidth {
	out := &v1alpha1.NodeBandwidth{
		TypeMeta: nbw.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: nbw.Name, Namespace: nbw.Namespace, UID: nbw.UID, ResourceVersion: nbw.ResourceVersion,
		},
	}
	st := &nbw.Status
	out.Status.SampleTime, out.Status.Window = st.SampleTime, st.Window
	remaining := func(b *v1alpha1.Bandwidth) v1alpha1.Bandwidth {
		return v1alpha1.Bandwidth{
			Ingress: v1alpha1.DirectionBandwidth{Capacity: b.Ingress.Capacity, Remaining: b.Ingress.Remaining},
			Egress:  v1alpha1.DirectionBandwidth{Capacity: b.Egress.Capacity, Remaining: b.Egress.Remaining},
		}
	}
	if len(st.Networks) > 0 {
		out.Status.Networks = make([]v1alpha1.NetworkBandwidth, len(st.Networks))
		for i := range st.Networks {
			nw := &st.Networks[i]
			out.Status.Networks[i] = v1alpha1.NetworkBandwidth{Name: nw.Name, Bandwidth: remaining(&nw.Bandwidth)}
			// Whether the node keeps guarantees there, and up to what.
			if c := meta.FindStatusCondition(nw.Conditions, v1alpha1.ConditionGuaranteesEnforced); c != nil {
				out.Status.Networks[i].Conditions = []metav1.Condition{{Type: c.Type, Status: c.Status}}
			}
			if g := nw.Guarantees; g != nil {
				out.Status.Networks[i].Guarantees = &v1alpha1.Guarantees{
					Ingress: v1alpha1.GuaranteedDirection{Capacity: g.Ingress.Capacity},
					Egress:  v1alpha1.GuaranteedDirection{Capacity: g.Egress.Capacity},
				}
			}
		}
	} else if st.Total != nil {
		total := remaining(st.Total)
		out.Status.Total = &total
	}
	return out
}

func storeTopology(in any) (any, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return in, nil
	}
	u.SetManagedFields(nil)
	full, err := DecodeTopology(u)
	if err != nil {
		return newRejected(kindTopology, u, err), nil
	}
	return trimTopology(full), nil
}

// trimTopology is the part of a checked NodeTopology that NUMAAware and DeviceAware
// read: identity, whether the agent pins, NUMA nodes, and per PCI device what decides
// whether it can be handed out (address, kind, NUMA node, health, holder, exclusion).
// Kinds, health values and NUMA node numbers are shared between all nodes instead of
// one copy per device: the garbage collector marks each held object in every cycle,
// and a device's descriptive strings (class, vendor, driver, PCIe root) and the NICs
// are never read (docs/design/0062-lean-topology-records.md).
func trimTopology(nt *v1alpha1.NodeTopology) *v1alpha1.NodeTopology {
	out := &v1alpha1.NodeTopology{
		TypeMeta: nt.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: nt.Name, Namespace: nt.Namespace, UID: nt.UID, ResourceVersion: nt.ResourceVersion, Generation: nt.Generation,
		},
	}
	out.Status.NUMAPinning = internPinning(nt.Status.NUMAPinning)
	in := &nt.Status.Topology
	out.Status.NUMANodes = in.NUMANodes
	if len(in.PCIDevices) > 0 {
		out.Status.PCIDevices = make([]v1alpha1.PCIDevice, len(in.PCIDevices))
		for i := range in.PCIDevices {
			d := &in.PCIDevices[i]
			out.Status.PCIDevices[i] = v1alpha1.PCIDevice{
				Address:  d.Address,
				Kind:     internKind(d.Kind),
				NUMANode: sharedNUMAID(d.NUMANode),
				Health:   internHealth(d.Health),
				Holder:   d.Holder,
				Excluded: d.Excluded,
			}
		}
	}
	return out
}

// numaIDs are the NUMA node numbers a device can name (ValidateTopology's bound), one
// shared pointer each: the plugins only read through them.
var numaIDs = func() (ids [MaxNUMANodes]int32) {
	for i := range ids {
		ids[i] = int32(i)
	}
	return ids
}()

func sharedNUMAID(id *int32) *int32 {
	if id == nil || *id < 0 || *id >= MaxNUMANodes {
		return id
	}
	return &numaIDs[*id]
}

func internKind(k v1alpha1.DeviceKind) v1alpha1.DeviceKind {
	for _, known := range [...]v1alpha1.DeviceKind{v1alpha1.KindGPU, v1alpha1.KindNIC, v1alpha1.KindNVMe, v1alpha1.KindAccelerator, v1alpha1.KindOther} {
		if k == known {
			return known
		}
	}
	return k
}

func internPinning(p v1alpha1.NUMAPinning) v1alpha1.NUMAPinning {
	switch p {
	case v1alpha1.PinningActive:
		return v1alpha1.PinningActive
	case v1alpha1.PinningPending:
		return v1alpha1.PinningPending
	case v1alpha1.PinningUnknown:
		return v1alpha1.PinningUnknown
	case v1alpha1.PinningOff:
		return v1alpha1.PinningOff
	case v1alpha1.PinningKubeletStaticCPUManager:
		return v1alpha1.PinningKubeletStaticCPUManager
	case v1alpha1.PinningKubeletStaticMemoryManager:
		return v1alpha1.PinningKubeletStaticMemoryManager
	}
	return p
}

func internHealth(h v1alpha1.DeviceHealth) v1alpha1.DeviceHealth {
	switch h {
	case v1alpha1.Healthy:
		return v1alpha1.Healthy
	case v1alpha1.Unhealthy:
		return v1alpha1.Unhealthy
	}
	return h
}
