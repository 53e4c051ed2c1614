package deviceplugin

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sextant.io/sextant/agent/topology"
)

// DeviceNodes are the /dev entries that belong to one PCI device, as paths relative to
// the dev directory ("vfio/12", "nvme0"): its own, and the control nodes its driver
// shares between all its devices.
type DeviceNodes struct {
	Own    []string
	Shared []string
}

// nodeDirs are the class directories under a PCI function whose entries name device
// nodes, and where those nodes live under /dev.
var nodeDirs = []struct {
	dir    string
	name   *regexp.Regexp
	devDir string
	shared []string
}{
	// iommufd's per-device VFIO cdev; the container also needs /dev/iommu.
	{"vfio-dev", regexp.MustCompile(`^vfio[0-9]+$`), "vfio/devices", []string{"iommu"}},
	// DRM render nodes: compute without the display master rights of cardN. AMD's
	// compute stack also needs /dev/kfd.
	{"drm", regexp.MustCompile(`^renderD[0-9]+$`), "dri", nil},
	// RDMA verbs of a NIC; connection management goes through /dev/infiniband/rdma_cm.
	{"infiniband_verbs", regexp.MustCompile(`^uverbs[0-9]+$`), "infiniband", []string{"infiniband/rdma_cm"}},
	// The compute accelerator subsystem (Habana, Intel NPU, ...).
	{"accel", regexp.MustCompile(`^accel[0-9]+$`), "accel", nil},
}

var (
	nvmeCtrlRE = regexp.MustCompile(`^nvme[0-9]+$`)
	// Namespaces as block devices and as generic character devices; controller paths
	// of native multipath (nvme0c0n1) have no node.
	nvmeNSRE    = regexp.MustCompile(`^(nvme[0-9]+n[0-9]+|ng[0-9]+n[0-9]+)$`)
	nvidiaMinRE = regexp.MustCompile(`^Device Minor:\s*([0-9]+)$`)
)

// nvidiaShared are the nodes every NVIDIA GPU's container needs beside its own.
var nvidiaShared = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}

// FindDeviceNodes finds the device nodes of the PCI function addr: through sysfs under
// root (which holds sys/ and proc/), kept only where they exist under devRoot (the
// host's /dev as the agent sees it). A node that is not there is not handed out: the
// runtime would fail the container on it. Nothing found is no error; warnings name
// what could not be read.
func FindDeviceNodes(root, devRoot, addr string) (DeviceNodes, []error) {
	var n DeviceNodes
	var warnings []error
	warn := func(err error) {
		if !errors.Is(err, fs.ErrNotExist) {
			warnings = append(warnings, err)
		}
	}
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(devRoot, filepath.FromSlash(rel)))
		return err == nil
	}
	own := func(rel string) {
		if exists(rel) && !slices.Contains(n.Own, rel) {
			n.Own = append(n.Own, rel)
		}
	}
	shared := func(rel string) {
		if exists(rel) && !slices.Contains(n.Shared, rel) {
			n.Shared = append(n.Shared, rel)
		}
	}
	dir, err := topology.Resolve(root, "sys/bus/pci/devices/"+addr)
	if err != nil {
		warn(err)
		return n, warnings
	}
	list := func(rel string) []string {
		names, err := topology.ReadDir(root, rel)
		if err != nil {
			warn(err)
			return nil
		}
		return names
	}

	// VFIO: the device's IOMMU group, whose node exists only while every device of the
	// group is bound to vfio-pci.
	if group, err := topology.LinkBase(root, dir+"/iommu_group"); err == nil {
		if exists("vfio/" + group) {
			own("vfio/" + group)
			shared("vfio/vfio")
		}
	} else {
		warn(err)
	}
	for _, d := range nodeDirs {
		for _, name := range list(dir + "/" + d.dir) {
			if d.name.MatchString(name) {
				own(d.devDir + "/" + name)
				if exists(d.devDir + "/" + name) {
					for _, s := range d.shared {
						shared(s)
					}
				}
			}
		}
	}
	if drv, err := topology.LinkBase(root, dir+"/driver"); err == nil && drv == "amdgpu" && len(n.Own) > 0 {
		shared("kfd")
	}
	// NVMe: the controller's character device, its namespaces, their partitions.
	for _, ctrl := range list(dir + "/nvme") {
		if !nvmeCtrlRE.MatchString(ctrl) {
			continue
		}
		own(ctrl)
		for _, ns := range list(dir + "/nvme/" + ctrl) {
			if !nvmeNSRE.MatchString(ns) {
				continue
			}
			own(ns)
			for _, part := range list(dir + "/nvme/" + ctrl + "/" + ns) {
				if strings.HasPrefix(part, ns+"p") && isDigits(part[len(ns)+1:]) {
					own(part)
				}
			}
		}
	}
	// NVIDIA's driver makes no sysfs class device: its procfs names the minor.
	if info, err := topology.ReadFile(root, "proc/driver/nvidia/gpus/"+addr+"/information"); err == nil {
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			if m := nvidiaMinRE.FindStringSubmatch(strings.TrimSpace(sc.Text())); m != nil && exists("nvidia"+m[1]) {
				own("nvidia" + m[1])
				for _, s := range nvidiaShared {
					shared(s)
				}
			}
		}
	} else {
		warn(err)
	}
	slices.Sort(n.Own)
	slices.Sort(n.Shared)
	return n, warnings
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// hostPath is where a node relative to the dev directory is on the host.
func hostPath(hostDev, rel string) string {
	return path.Join(hostDev, rel)
}

// describe lists nodes for a log line.
func (n DeviceNodes) describe() string {
	return fmt.Sprintf("own %v, shared %v", n.Own, n.Shared)
}
