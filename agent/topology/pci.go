package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"

	"sextant.io/sextant/api/v1alpha1"
)

const pciDevicesDir = "sys/bus/pci/devices"

var (
	// pciAddressRE matches a PCI function address; domains wider than 16 bits exist
	// (Intel VMD, hwloc's 2pa-pcidomain32bits).
	pciAddressRE = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	// hostBridgeRE matches a PCI host bridge's sysfs directory, "pci0000:00".
	hostBridgeRE = regexp.MustCompile(`^pci([0-9a-f]{4,8}:[0-9a-f]{2})$`)
	hexIDRE      = regexp.MustCompile(`^0x[0-9a-f]{4}$`)
	hexClassRE   = regexp.MustCompile(`^0x[0-9a-f]{6}$`)
)

// Classify returns a device's kind from its 24-bit PCI class code (base class, subclass,
// programming interface).
func Classify(class uint32) v1alpha1.DeviceKind {
	switch {
	case class>>16 == 0x03: // display controllers: VGA, XGA, 3D, other
		return v1alpha1.KindGPU
	case class>>16 == 0x02: // network controllers, InfiniBand included
		return v1alpha1.KindNIC
	case class == 0x010802: // mass storage, non-volatile memory, NVM Express
		return v1alpha1.KindNVMe
	case class>>16 == 0x12, // processing accelerators
		class>>8 == 0x0b40: // co-processors (Xeon Phi and the like)
		return v1alpha1.KindAccelerator
	}
	return v1alpha1.KindOther
}

// isPCIBridge reports PCI-to-PCI bridges (0x0604, and semi-transparent 0x0609): root
// ports and switch ports, which carry other devices and are never given to a pod. hwloc
// shows exactly these as Bridge objects; host bridges (0x0600) and the rest stay devices.
func isPCIBridge(class uint32) bool {
	return class>>8 == 0x0604 || class>>8 == 0x0609
}

// readPCIDevices reads every PCI function except PCI-to-PCI bridges. Devices the kernel
// reports faults on are Unhealthy, with the reasons in faulty by address.
func readPCIDevices(r root, numa numaInfo, faulty map[string][]string, warn func(error)) ([]v1alpha1.PCIDevice, error) {
	names, err := r.readDir(pciDevicesDir)
	if errors.Is(err, fs.ErrNotExist) {
		return []v1alpha1.PCIDevice{}, nil
	}
	if err != nil {
		return nil, err
	}
	devs := []v1alpha1.PCIDevice{}
	for _, name := range names {
		if !pciAddressRE.MatchString(name) {
			continue
		}
		d, ok := readPCIDevice(r, numa, name, faulty, warn)
		if ok {
			devs = append(devs, d)
		}
	}
	return devs, nil
}

// readPCIDevice reads one function. A device whose identity cannot be read is left out
// with a warning: publishing it with a guessed kind would be a wrong topology.
func readPCIDevice(r root, numa numaInfo, name string, faulty map[string][]string, warn func(error)) (v1alpha1.PCIDevice, bool) {
	link := pciDevicesDir + "/" + name
	dir, err := r.resolve(link)
	if err != nil {
		warn(fmt.Errorf("PCI device %s left out: %w", name, err))
		return v1alpha1.PCIDevice{}, false
	}
	class, err := readHex(r, dir+"/class", hexClassRE)
	if err != nil {
		warn(fmt.Errorf("PCI device %s left out: %w", name, err))
		return v1alpha1.PCIDevice{}, false
	}
	c, _ := strconv.ParseUint(class[2:], 16, 32)
	if isPCIBridge(uint32(c)) {
		return v1alpha1.PCIDevice{}, false
	}
	vendor, err := readHex(r, dir+"/vendor", hexIDRE)
	if err != nil {
		warn(fmt.Errorf("PCI device %s left out: %w", name, err))
		return v1alpha1.PCIDevice{}, false
	}
	device, err := readHex(r, dir+"/device", hexIDRE)
	if err != nil {
		warn(fmt.Errorf("PCI device %s left out: %w", name, err))
		return v1alpha1.PCIDevice{}, false
	}
	d := v1alpha1.PCIDevice{
		Address:  name,
		Class:    class,
		Vendor:   vendor,
		Device:   device,
		Kind:     Classify(uint32(c)),
		NUMANode: locality(r, numa, dir, warn),
		PCIeRoot: pcieRoot(dir),
		Health:   v1alpha1.Healthy,
	}
	if drv, err := r.linkBase(dir + "/driver"); err == nil {
		d.Driver = drv
	} else if !errors.Is(err, fs.ErrNotExist) {
		warn(err)
	}
	if f := faults(r, dir, d.Kind, warn); len(f) > 0 {
		d.Health = v1alpha1.Unhealthy
		faulty[name] = f
	}
	return d, true
}

// readHex reads an ID file such as class or vendor, normalized to lower case.
func readHex(r root, f string, re *regexp.Regexp) (string, error) {
	s, err := r.readFile(f)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("reading %s: %w", r.display(f), err)
	}
	if err != nil {
		return "", err
	}
	s = strings.ToLower(s)
	if !re.MatchString(s) {
		return "", fmt.Errorf("parsing %s: unexpected content %q", r.display(f), s)
	}
	return s, nil
}

// locality finds the NUMA node of the PCI function at dir (a resolved path). The kernel's
// numa_node comes first; where it is -1 or missing (firmware without _PXM, VMs), the
// node is inferred as hwloc does, from the CPUs local to the device or, failing that, to
// the buses above it. nil means unknown, or local to more than one node.
func locality(r root, numa numaInfo, dir string, warn func(error)) *int32 {
	// With one NUMA node there is nowhere else a device could be.
	if len(numa.nodes) == 1 {
		id := numa.nodes[0].ID
		return &id
	}
	f := dir + "/numa_node"
	s, err := r.readFile(f)
	switch {
	case err == nil:
		n, perr := strconv.ParseInt(s, 10, 32)
		switch {
		case perr != nil:
			warn(fmt.Errorf("parsing %s: unexpected content %q; inferring the NUMA node from local CPUs", r.display(f), s))
		case n >= 0 && numa.has(int32(n)):
			id := int32(n)
			return &id
		case n >= 0:
			warn(fmt.Errorf("%s names NUMA node %d, which does not exist; inferring the NUMA node from local CPUs", r.display(f), n))
		}
	case !errors.Is(err, fs.ErrNotExist):
		warn(err)
	}

	comps := splitPath(dir)
	for i := len(comps) - 1; i >= 0; i-- {
		c := comps[i]
		p := strings.Join(comps[:i+1], "/")
		switch {
		case pciAddressRE.MatchString(c):
			if cpus, ok := readLocalCPUs(r, p+"/local_cpulist", p+"/local_cpus", warn); ok {
				return numa.nodeOf(cpus)
			}
		case hostBridgeRE.MatchString(c):
			bus := hostBridgeRE.FindStringSubmatch(c)[1]
			b := p + "/pci_bus/" + bus
			if cpus, ok := readLocalCPUs(r, b+"/cpulistaffinity", b+"/cpuaffinity", warn); ok {
				return numa.nodeOf(cpus)
			}
			return nil
		default:
			// Not PCI (a virtio or USB device under a PCI function): keep climbing.
		}
	}
	return nil
}

// readLocalCPUs reads a list file, or else a mask file, of local CPUs. ok is false when
// neither says anything (missing, empty, or malformed: the last with a warning).
func readLocalCPUs(r root, listFile, maskFile string, warn func(error)) ([]int32, bool) {
	for _, f := range []struct {
		name  string
		parse func(string) ([]int32, error)
	}{{listFile, ParseCPUList}, {maskFile, ParseCPUMask}} {
		s, err := r.readFile(f.name)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				warn(err)
			}
			continue
		}
		cpus, err := f.parse(s)
		if err != nil {
			warn(fmt.Errorf("parsing %s: %w", r.display(f.name), err))
			continue
		}
		if len(cpus) > 0 {
			return cpus, true
		}
	}
	return nil, false
}

// pcieRoot returns the root port above the PCI function at dir (the first PCI function
// below the host bridge), or the host bridge's sysfs name ("pci0000:00") for functions
// that sit on the root bus themselves. Devices behind the same root share its links.
func pcieRoot(dir string) string {
	comps := splitPath(dir)
	for i := len(comps) - 1; i >= 0; i-- {
		if !hostBridgeRE.MatchString(comps[i]) {
			continue
		}
		if i+2 < len(comps) && pciAddressRE.MatchString(comps[i+1]) {
			return comps[i+1]
		}
		return comps[i]
	}
	return ""
}
