package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"sextant.io/sextant/api/v1alpha1"
)

const netDir = "sys/class/net"

// arphrdLoopback is ARPHRD_LOOPBACK, the `type` of loopback interfaces.
const arphrdLoopback = "772"

// readNICs reads every network interface except loopback: lo carries no traffic that
// leaves the node, has no capacity and no locality, so it has nothing to tell the
// ranker. Virtual interfaces (veth, bridges, VLANs) are listed with a null pciAddress.
func readNICs(r root, numa numaInfo, devs []v1alpha1.PCIDevice, warn func(error)) ([]v1alpha1.NIC, error) {
	names, err := r.readDir(netDir)
	if errors.Is(err, fs.ErrNotExist) {
		return []v1alpha1.NIC{}, nil
	}
	if err != nil {
		return nil, err
	}
	byAddr := map[string]*int32{}
	for _, d := range devs {
		byAddr[d.Address] = d.NUMANode
	}
	nics := []v1alpha1.NIC{}
	for _, name := range names {
		// Resolved first, so that what follows reads inside the root even where a link
		// is absolute.
		dir, err := r.resolve(netDir + "/" + name)
		if err != nil {
			if name != "lo" {
				warn(fmt.Errorf("interface %s left out: %w", name, err))
			}
			continue
		}
		// Not every entry is an interface: the bonding driver adds a bonding_masters file.
		if fi, err := os.Stat(r.abs(dir)); err != nil || !fi.IsDir() {
			continue
		}
		typ, err := r.readFile(dir + "/type")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			warn(err)
		}
		if typ == arphrdLoopback || (err != nil && name == "lo") {
			continue
		}
		n := v1alpha1.NIC{Name: name}
		if addr, devDir, ok := nicPCIFunction(r, name, dir, warn); ok {
			n.PCIAddress = &addr
			if node, listed := byAddr[addr]; listed {
				n.NUMANode = node
			} else {
				n.NUMANode = locality(r, numa, devDir, warn)
			}
		}
		// speed fails with EINVAL while the link is down, and reads -1 for
		// interfaces without a notion of speed: both are "unknown".
		if s, err := r.readFile(dir + "/speed"); err == nil {
			if v, err := strconv.ParseInt(s, 10, 64); err == nil && v > 0 {
				n.SpeedMbps = &v
			}
		}
		nics = append(nics, n)
	}
	return nics, nil
}

// nicPCIFunction finds the PCI function behind an interface: its `device` link, or the
// nearest PCI function above what that link points to (virtio-net sits on a virtio
// device under its PCI function). Interfaces without a `device` link are virtual.
func nicPCIFunction(r root, name, dir string, warn func(error)) (addr, devDir string, ok bool) {
	link := dir + "/device"
	if _, err := os.Lstat(r.abs(link)); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			warn(fmt.Errorf("reading %s: %w", r.display(link), err))
		}
		return "", "", false
	}
	p, err := r.resolve(link)
	if err != nil {
		warn(fmt.Errorf("interface %s: PCI address unknown: %w", name, err))
		return "", "", false
	}
	comps := splitPath(p)
	for i := len(comps) - 1; i >= 0; i-- {
		if pciAddressRE.MatchString(comps[i]) {
			return comps[i], strings.Join(comps[:i+1], "/"), true
		}
	}
	return "", "", false
}
