package deviceplugin

import (
	"slices"

	"github.com/go-logr/logr"

	"sextant.io/sextant/api/v1alpha1"
)

// Locator finds what a container needs to use a node's PCI devices. The device plugin's
// Allocate and the DRA driver's Prepare both answer with it.
type Locator struct {
	// SysfsRoot holds sys/ and proc/ (the agent's --sysfs-root).
	SysfsRoot string
	// DevRoot is the host's dev directory as the agent sees it.
	DevRoot string
	// HostDevDir is the host's dev directory as the kubelet and the runtime see it.
	HostDevDir string
	// CDISpecDirs are read for vendors' CDI specs naming the devices.
	CDISpecDirs []string
	Log         logr.Logger
}

// DeviceNode is one device node a container gets.
type DeviceNode struct {
	HostPath, ContainerPath string
}

// Edits are a set of devices' device nodes, own and shared, each once, and the vendor
// CDI devices that stand for exactly those devices.
type Edits struct {
	Nodes []DeviceNode
	CDI   []string
}

// Edits finds the edits for ids (PCI addresses, sorted) among all, the node's devices:
// a CDI device that lists another device's own node stands for more than ids and is
// left out.
func (l Locator) Edits(ids []string, all []v1alpha1.PCIDevice) Edits {
	var out Edits
	var own, shared []string
	ownBy := map[string][]string{}
	for _, id := range ids {
		n, warnings := FindDeviceNodes(l.SysfsRoot, l.DevRoot, id)
		for _, w := range warnings {
			l.Log.Error(w, "reading a device's nodes", "device", id)
		}
		for _, rel := range n.Own {
			own = append(own, rel)
			ownBy[id] = append(ownBy[id], hostPath(l.HostDevDir, rel))
		}
		shared = append(shared, n.Shared...)
	}
	nodes := append(own, shared...)
	slices.Sort(nodes)
	for _, rel := range slices.Compact(nodes) {
		out.Nodes = append(out.Nodes, DeviceNode{HostPath: hostPath(l.HostDevDir, rel), ContainerPath: hostPath(containerDev, rel)})
	}
	if len(l.CDISpecDirs) == 0 {
		return out
	}
	specs, warnings := loadCDI(l.CDISpecDirs)
	for _, w := range warnings {
		l.Log.Error(w, "reading CDI specs")
	}
	if len(specs) == 0 {
		return out
	}
	others := l.othersOwnNodes(ids, all)
	for _, id := range ids {
		for _, n := range matchCDI(specs, id, ownBy[id], others) {
			if !slices.Contains(out.CDI, n) {
				out.CDI = append(out.CDI, n)
			}
		}
	}
	slices.Sort(out.CDI)
	return out
}

// othersOwnNodes are the own device nodes (host paths) of all's devices other than ids:
// a CDI device listing one of them stands for more than these devices.
func (l Locator) othersOwnNodes(ids []string, all []v1alpha1.PCIDevice) map[string]bool {
	out := map[string]bool{}
	for _, d := range all {
		if d.Kind == v1alpha1.KindOther || slices.Contains(ids, d.Address) {
			continue
		}
		n, _ := FindDeviceNodes(l.SysfsRoot, l.DevRoot, d.Address)
		for _, rel := range n.Own {
			out[hostPath(l.HostDevDir, rel)] = true
		}
	}
	return out
}
