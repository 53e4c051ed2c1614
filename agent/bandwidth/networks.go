package bandwidth

import (
	"fmt"
	"net"
	"path"
	"slices"
	"strings"

	"sextant.io/sextant/api/annotations"
)

// NetworkSpec names a network of the node and the interfaces that carry it, by name or
// shell pattern, as --network NAME=IFACE[,IFACE...] gives them.
type NetworkSpec struct {
	Name       string
	Interfaces []string
}

const networkForm = "NAME=IFACE[,IFACE...], NAME a DNS label (pod, storage, ...) and each IFACE an interface name or shell pattern (eth*)"

// ParseNetworks parses --network values. A name may be given once; "pod" overrides the
// automatic choice of the pod network.
func ParseNetworks(values []string) ([]NetworkSpec, error) {
	var specs []NetworkSpec
	for _, v := range values {
		name, list, ok := strings.Cut(v, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.TrimSpace(list) == "" {
			return nil, fmt.Errorf("--network %q: want %s", v, networkForm)
		}
		if !annotations.IsNetworkName(name) {
			return nil, fmt.Errorf("--network %q: %q is not a DNS label; want %s", v, name, networkForm)
		}
		if slices.ContainsFunc(specs, func(s NetworkSpec) bool { return s.Name == name }) {
			return nil, fmt.Errorf("--network %q: network %s is given twice", v, name)
		}
		spec := NetworkSpec{Name: name}
		for _, pat := range strings.Split(list, ",") {
			pat = strings.TrimSpace(pat)
			if _, err := path.Match(pat, ""); err != nil || pat == "" {
				return nil, fmt.Errorf("--network %q: %q is not an interface name or pattern; want %s", v, pat, networkForm)
			}
			spec.Interfaces = append(spec.Interfaces, pat)
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// Link kinds whose own counters and speed do not count: they resolve to the devices
// under them.
const (
	kindBond    = "bond"
	kindBridge  = "bridge"
	kindVLAN    = "vlan"
	kindMacvlan = "macvlan"
	kindIPvlan  = "ipvlan"
)

// meteredLink resolves l to the interfaces whose counters count its traffic, each once:
// a VLAN, macvlan or ipvlan to its lower device; a bridge to its ports that are NICs or
// bonds, or VLANs over them (not the veths of pods); a bond's slave to its bond; a bond,
// and anything else, to itself.
func meteredLink(byIndex map[int]Link, l Link) []Link {
	return resolveLink(byIndex, l, 0)
}

func resolveLink(byIndex map[int]Link, l Link, depth int) []Link {
	if depth > 8 { // a loop in what netlink reported: stop where we are
		return []Link{l}
	}
	switch l.Kind {
	case kindVLAN, kindMacvlan, kindIPvlan:
		if lower, ok := byIndex[l.ParentIndex]; ok && l.ParentIndex != l.Index {
			return resolveLink(byIndex, lower, depth+1)
		}
	case kindBridge:
		var ports []Link
		for _, p := range byIndex {
			if p.MasterIndex != l.Index {
				continue
			}
			switch {
			case p.Physical || p.Kind == kindBond:
				ports = append(ports, resolveLink(byIndex, p, depth+1)...)
			case p.Kind == kindVLAN:
				// An uplink tagged on the way out (br0 over eth0.100): its traffic is the
				// NIC's or bond's under it. A VLAN over a pod's veth is not an uplink.
				for _, lower := range resolveLink(byIndex, p, depth+1) {
					if lower.Physical || lower.Kind == kindBond {
						ports = append(ports, lower)
					}
				}
			}
		}
		if len(ports) > 0 {
			return ports
		}
	}
	if master, ok := byIndex[l.MasterIndex]; ok && l.MasterIndex != 0 && master.Kind == kindBond {
		return []Link{master}
	}
	return []Link{l}
}

// groupNetworks returns each network's metered interfaces, by ifindex, sorted by name.
// The pod network, unless specs name it, is the interface holding one of nodeIPs, else
// the default route's (IPv4 or IPv6), resolved like any other.
func groupNetworks(links []Link, specs []NetworkSpec, nodeIPs []net.IP) map[string][]Link {
	byIndex := make(map[int]Link, len(links))
	for _, l := range links {
		byIndex[l.Index] = l
	}
	out := map[string][]Link{}
	add := func(network string, l Link) {
		for _, m := range meteredLink(byIndex, l) {
			if !slices.ContainsFunc(out[network], func(o Link) bool { return o.Index == m.Index }) {
				out[network] = append(out[network], m)
			}
		}
	}
	for _, spec := range specs {
		for _, l := range links {
			if slices.ContainsFunc(spec.Interfaces, func(pat string) bool { ok, _ := path.Match(pat, l.Name); return ok }) {
				add(spec.Name, l)
			}
		}
	}
	if !slices.ContainsFunc(specs, func(s NetworkSpec) bool { return s.Name == annotations.PodNetwork }) {
		var pod []Link
		for _, l := range links {
			if slices.ContainsFunc(l.Addrs, func(a net.IP) bool {
				return slices.ContainsFunc(nodeIPs, func(ip net.IP) bool { return ip.Equal(a) })
			}) {
				pod = append(pod, l)
			}
		}
		if len(pod) == 0 {
			for _, l := range links {
				if l.DefaultRoute {
					pod = append(pod, l)
				}
			}
		}
		for _, l := range pod {
			add(annotations.PodNetwork, l)
		}
	}
	for name := range out {
		slices.SortFunc(out[name], func(a, b Link) int { return strings.Compare(a.Name, b.Name) })
	}
	return out
}

// NetworkTotal is one network of a Snapshot added up: capacity, rate, peak and the
// counters are sums over its interfaces (what the network carries), remaining is the
// largest of any one interface with a known capacity, since one pod's traffic crosses
// one of them. Two separate 10G NICs with 8G and 6G left admit a pod that requires 8G,
// not 14G; a 2x10G bond is one interface and admits what the bond has left.
type NetworkTotal struct {
	Name string
	// Interfaces are those of the network the snapshot has samples of.
	Interfaces []string
	Ingress    DirectionSample
	Egress     DirectionSample
}

// NetworkTotals adds up the snapshot's networks; a network none of whose interfaces
// has a sample yet is left out.
func (s Snapshot) NetworkTotals() []NetworkTotal {
	byName := make(map[string]*InterfaceSample, len(s.Interfaces))
	for i := range s.Interfaces {
		byName[s.Interfaces[i].Name] = &s.Interfaces[i]
	}
	var out []NetworkTotal
	for _, nw := range s.Networks {
		t := NetworkTotal{Name: nw.Name}
		for _, name := range nw.Interfaces {
			i, ok := byName[name]
			if !ok {
				continue // attached but not sampled yet, or not attached
			}
			t.Interfaces = append(t.Interfaces, name)
			addDirection(&t.Ingress, i.Ingress)
			addDirection(&t.Egress, i.Egress)
		}
		if len(t.Interfaces) > 0 {
			out = append(out, t)
		}
	}
	return out
}

func addDirection(sum *DirectionSample, d DirectionSample) {
	sum.Rate += d.Rate
	sum.Peak += d.Peak
	sum.Bytes += d.Bytes
	sum.Packets += d.Packets
	if d.Capacity == nil || d.Remaining == nil {
		return
	}
	if sum.Capacity == nil {
		c, r := *d.Capacity, *d.Remaining
		sum.Capacity, sum.Remaining = &c, &r
		return
	}
	*sum.Capacity += *d.Capacity
	*sum.Remaining = max(*sum.Remaining, *d.Remaining)
}
