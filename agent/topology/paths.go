package topology

// The parts of the agent that read sysfs beside the topology (the device plugin's
// device nodes, the host-device scan) read it the same way: under the same root, links
// resolved inside it, files bounded and trimmed, a missing file fs.ErrNotExist.

// ReadFile returns the trimmed content of the file rel (slash-separated, relative to the
// root dir, e.g. "sys/bus/pci/devices/0000:3b:00.0/numa_node"). A missing file is
// fs.ErrNotExist; other failures name the file.
func ReadFile(dir, rel string) (string, error) { return root(dir).readFile(rel) }

// ReadDir lists the entry names of the directory rel under dir; a missing directory is
// fs.ErrNotExist.
func ReadDir(dir, rel string) ([]string, error) { return root(dir).readDir(rel) }

// LinkBase returns the last element of the target of the symlink rel under dir (a
// driver or iommu_group link names its target this way), without following it.
func LinkBase(dir, rel string) (string, error) { return root(dir).linkBase(rel) }

// Resolve follows every symlink in rel inside dir, absolute targets taken relative to
// dir, and returns the real path relative to dir. A dangling link is fs.ErrNotExist.
func Resolve(dir, rel string) (string, error) { return root(dir).resolve(rel) }

// PCIFunctionOf returns the address of the PCI function at or nearest above what rel
// resolves to ("sys/class/net/eth0/device", "sys/dev/block/259:0"), and "" when no PCI
// function is above it (virtual devices).
func PCIFunctionOf(dir, rel string) (string, error) {
	p, err := root(dir).resolve(rel)
	if err != nil {
		return "", err
	}
	comps := splitPath(p)
	for i := len(comps) - 1; i >= 0; i-- {
		if pciAddressRE.MatchString(comps[i]) {
			return comps[i], nil
		}
	}
	return "", nil
}
