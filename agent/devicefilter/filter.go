package devicefilter

import (
	"net/netip"
	"path"

	"sextant.io/sextant/api/v1alpha1"
)

// Selector decides which devices may be handed to pods.
type Selector struct {
	// Root holds sys/ and proc/ (the agent's --sysfs-root).
	Root string
	// Rules are the operator's, applied after the host defaults.
	Rules Rules
	// NodeAddresses returns the node's own addresses (its Node's InternalIP and
	// ExternalIP); nil means none are known.
	NodeAddresses func() []netip.Addr
}

// Excluded returns, by PCI address, the devices of devs that must not be handed to
// pods and why, and the warnings of the host scan. It scans the host on every call:
// routes and mounts change while the node runs.
func (s *Selector) Excluded(devs []v1alpha1.PCIDevice) (map[string]string, []error) {
	var addrs []netip.Addr
	if s.NodeAddresses != nil {
		addrs = s.NodeAddresses()
	}
	host, warnings := ScanHost(s.Root, addrs)
	return s.decide(devs, host), warnings
}

// decide applies the host defaults and then the rules, the last matching rule winning.
func (s *Selector) decide(devs []v1alpha1.PCIDevice, host Host) map[string]string {
	out := map[string]string{}
	for _, d := range devs {
		reason := host.Devices[d.Address]
		switch {
		case reason != "":
		case d.Kind == v1alpha1.KindNIC && !host.RoutesKnown:
			reason = "NICs held back: no route table under " + path.Join(s.Root, "proc/net") + " tells which NIC is the host's"
		case d.Kind == v1alpha1.KindNVMe && !host.MountsKnown:
			reason = "NVMe drives held back: no mountinfo under " + path.Join(s.Root, "proc") + " tells which drive backs the host's filesystems"
		}
		for _, r := range s.Rules {
			if !r.Matches(d) {
				continue
			}
			if r.Include {
				reason = ""
			} else {
				reason = "excluded by the device filter rule " + r.String()
			}
		}
		if reason != "" {
			out[d.Address] = reason
		}
	}
	return out
}
