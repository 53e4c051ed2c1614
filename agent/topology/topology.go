package topology

import (
	"cmp"
	"slices"

	"sextant.io/sextant/api/v1alpha1"
)

// Snapshot is one reading of a node's topology.
type Snapshot struct {
	// Topology has every present device Healthy unless the kernel reports a fault on
	// it (Faults); a Tracker adds what only time tells (a device gone, a driver lost).
	Topology v1alpha1.Topology
	// Faults are the reasons, by PCI address, that present devices are Unhealthy.
	Faults map[string][]string
	// Warnings are the items left out or left unknown ("no data") and why, each naming
	// the file. They do not make the topology wrong, only less complete.
	Warnings []error
}

// Read reads the topology of the machine whose sysfs and procfs are mounted under dir
// (dir/sys, dir/proc; "/" on a live node). It fails, naming the file, only where going
// on would publish a wrong topology: a malformed CPU list or meminfo of a NUMA node, or
// an unreadable online-CPU list.
func Read(dir string) (*Snapshot, error) {
	r := root(dir)
	snap := &Snapshot{Faults: map[string][]string{}}
	warn := func(err error) { snap.Warnings = append(snap.Warnings, err) }

	online, err := readOnlineCPUs(r)
	if err != nil {
		return nil, err
	}
	numa, err := readNUMA(r, online, warn)
	if err != nil {
		return nil, err
	}
	devs, err := readPCIDevices(r, numa, snap.Faults, warn)
	if err != nil {
		return nil, err
	}
	nics, err := readNICs(r, numa, devs, warn)
	if err != nil {
		return nil, err
	}
	snap.Topology = v1alpha1.Topology{NUMANodes: numa.nodes, PCIDevices: devs, NICs: nics}
	Normalize(&snap.Topology)
	return snap, nil
}

// Normalize sorts a topology's lists (NUMA nodes by ID, devices by address, NICs by
// name) and makes nil lists empty, so that it serializes to the same bytes whenever it
// holds the same things: publishing "on change" compares them.
func Normalize(t *v1alpha1.Topology) {
	if t.NUMANodes == nil {
		t.NUMANodes = []v1alpha1.NUMANode{}
	}
	if t.PCIDevices == nil {
		t.PCIDevices = []v1alpha1.PCIDevice{}
	}
	if t.NICs == nil {
		t.NICs = []v1alpha1.NIC{}
	}
	for i := range t.NUMANodes {
		if t.NUMANodes[i].CPUs == nil {
			t.NUMANodes[i].CPUs = []int32{}
		}
		slices.Sort(t.NUMANodes[i].CPUs)
	}
	slices.SortFunc(t.NUMANodes, func(a, b v1alpha1.NUMANode) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(t.PCIDevices, func(a, b v1alpha1.PCIDevice) int { return comparePCIAddress(a.Address, b.Address) })
	slices.SortFunc(t.NICs, func(a, b v1alpha1.NIC) int { return cmp.Compare(a.Name, b.Name) })
}

// comparePCIAddress orders addresses by domain number first, so that the 32-bit
// domains of VMD ("10000:00:00.0") sort after "ffff:..." rather than between "0000" and
// "2000"; within a domain the fixed-width rest sorts as text.
func comparePCIAddress(a, b string) int {
	da, ra := splitDomain(a)
	db, rb := splitDomain(b)
	if c := cmp.Compare(len(da), len(db)); c != 0 {
		return c
	}
	if c := cmp.Compare(da, db); c != 0 {
		return c
	}
	return cmp.Compare(ra, rb)
}

func splitDomain(addr string) (domain, rest string) {
	for i := 0; i < len(addr); i++ {
		if addr[i] == ':' {
			return addr[:i], addr[i:]
		}
	}
	return addr, ""
}
