package topology

import (
	"slices"
	"sync"

	"sextant.io/sextant/api/v1alpha1"
)

// Tracker decides device health over time. It remembers every device it has seen, by
// PCI address, so that a device which vanishes is still published, as Unhealthy, rather
// than silently dropped: the ranker must stop handing it out, and whoever allocated it
// must be able to see why. Seeded from the last published list, it keeps that memory
// across agent restarts.
//
// A device is Unhealthy when
//   - its sysfs entry is gone (hot-unplugged, or removed after "fell off the bus"), or
//   - it is disabled: it had a driver bound, at some point since the tracker (or its
//     seed) first saw it, and now has none; the kernel unbinds a driver that fails or is
//     removed, and a device without one cannot serve a pod, or
//   - the reading itself says so: Read marks devices the kernel reports faults on (PCIe
//     AER fatal errors, a degraded link; see Snapshot.Faults).
//
// The `enable` file is deliberately not used: it counts pci_enable_device() callers, so
// it reads 0 for healthy devices whose driver never enables them (host bridges,
// piix4_smbus), and for vfio-pci devices whenever no VM or pod has them open.
//
// A device is Healthy again once it is present, read as Healthy and, if it ever had a
// driver, has one again (any driver: rebinding a GPU from nvidia to vfio-pci is a choice, not a fault).
// A device seeded as Unhealthy needs a driver to recover, since the seed cannot say
// whether it had vanished or been disabled.
type Tracker struct {
	mu    sync.Mutex
	known map[string]*tracked
}

type tracked struct {
	dev       v1alpha1.PCIDevice // last seen (or seeded) record
	hadDriver bool
}

// NewTracker returns a Tracker that already knows the given devices, typically the
// pciDevices of the NodeTopology this node published before the agent restarted.
// Entries without an address are ignored.
func NewTracker(seed []v1alpha1.PCIDevice) *Tracker {
	t := &Tracker{known: map[string]*tracked{}}
	for _, d := range seed {
		if d.Address == "" {
			continue
		}
		// A device published Unhealthy may have been disabled, and the published record
		// (which shows the current driver, none) cannot say: it must come back with a
		// driver to count as healthy, so a restart never hides a fault.
		t.known[d.Address] = &tracked{dev: d, hadDriver: d.Driver != "" || d.Health == v1alpha1.Unhealthy}
	}
	return t
}

// Update takes the devices present now (as Read returns them, Unhealthy where the
// kernel reports a fault) and returns every device the tracker knows, present or not,
// with its health, sorted by address.
func (t *Tracker) Update(present []v1alpha1.PCIDevice) []v1alpha1.PCIDevice {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := make(map[string]bool, len(present))
	for _, d := range present {
		seen[d.Address] = true
		k, ok := t.known[d.Address]
		if !ok {
			k = &tracked{}
			t.known[d.Address] = k
		}
		k.hadDriver = k.hadDriver || d.Driver != ""
		k.dev = d
		k.dev.Health = v1alpha1.Healthy
		if d.Health == v1alpha1.Unhealthy || k.hadDriver && d.Driver == "" {
			k.dev.Health = v1alpha1.Unhealthy
		}
	}
	out := make([]v1alpha1.PCIDevice, 0, len(t.known))
	for addr, k := range t.known {
		if !seen[addr] {
			k.dev.Health = v1alpha1.Unhealthy
		}
		out = append(out, k.dev)
	}
	slices.SortFunc(out, func(a, b v1alpha1.PCIDevice) int { return comparePCIAddress(a.Address, b.Address) })
	return out
}
