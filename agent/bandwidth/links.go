package bandwidth

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Link is a network interface as the meter selects and labels it.
type Link struct {
	Name  string
	Index int
	// Up is the operational state, not IFF_UP: a NIC set up by its administrator but
	// without carrier (cable or switch port down, a veth whose peer is down) carries
	// nothing, and the meter leaves it out. It is what IFF_RUNNING says: operstate UP,
	// or UNKNOWN on a link set up, because drivers that do not track a carrier (lo,
	// tun, some virtual NICs) never report anything else.
	Up bool
	// Physical is true for interfaces backed by a device (a `device` link in
	// sysfs): their sysfs speed is real; a veth's or a bridge's is made up.
	Physical bool
	// VirtualFunction is true for an SR-IOV virtual function (a `device/physfn` link
	// in sysfs). It shares its physical function's line, and the SR-IOV CNI moves it
	// into a pod's namespace, taking along whatever is attached to its hooks.
	VirtualFunction bool
	DefaultRoute    bool
	// SpeedMbps is the sysfs speed, 0 when unknown.
	SpeedMbps int64
	// Kind is netlink's link type: device, bond, bridge, vlan, macvlan, veth, ...
	Kind string
	// MasterIndex is the bond or bridge the link is enslaved to, 0 for none;
	// ParentIndex the lower device of a VLAN, macvlan or ipvlan, 0 for none.
	MasterIndex, ParentIndex int
	// Addrs are the link's IP addresses (to find the one holding the Node's IP).
	Addrs []net.IP
}

// LinkLister lists the interfaces of one network namespace.
type LinkLister interface {
	Links() ([]Link, error)
}

// SystemLinks lists interfaces through netlink and reads their speed and
// device from a sysfs tree.
type SystemLinks struct {
	// SysfsRoot is the directory that holds sys/class/net, "/" on a host.
	SysfsRoot string
	// NetnsPath is the namespace to list; empty means the caller's.
	NetnsPath string
}

func (s SystemLinks) Links() ([]Link, error) {
	h, err := s.handle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	nls, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	defaults := map[int]bool{}
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask) {
			defaults[r.LinkIndex] = true
			for _, nh := range r.MultiPath {
				defaults[nh.LinkIndex] = true
			}
		}
	}
	links := make([]Link, 0, len(nls))
	for _, nl := range nls {
		a := nl.Attrs()
		dir := filepath.Join(s.root(), "sys", "class", "net", a.Name)
		_, err := os.Lstat(filepath.Join(dir, "device"))
		_, vfErr := os.Lstat(filepath.Join(dir, "device", "physfn"))
		var addrs []net.IP
		// Without its addresses the link can still be metered; it is only not found by
		// the Node's IP.
		if list, err := h.AddrList(nl, netlink.FAMILY_ALL); err == nil {
			for _, ad := range list {
				if ad.IPNet != nil {
					addrs = append(addrs, ad.IP)
				}
			}
		}
		links = append(links, Link{
			Name:            a.Name,
			Index:           a.Index,
			Up:              a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown && a.Flags&net.FlagUp != 0,
			Physical:        err == nil,
			VirtualFunction: vfErr == nil,
			DefaultRoute:    defaults[a.Index],
			SpeedMbps:       readSpeed(filepath.Join(dir, "speed")),
			Kind:            nl.Type(),
			MasterIndex:     a.MasterIndex,
			ParentIndex:     a.ParentIndex,
			Addrs:           addrs,
		})
	}
	return links, nil
}

func (s SystemLinks) root() string {
	if s.SysfsRoot == "" {
		return "/"
	}
	return s.SysfsRoot
}

func (s SystemLinks) handle() (*netlink.Handle, error) {
	if s.NetnsPath == "" {
		h, err := netlink.NewHandle()
		if err != nil {
			return nil, fmt.Errorf("open netlink: %w", err)
		}
		return h, nil
	}
	ns, err := netns.GetFromPath(s.NetnsPath)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", s.NetnsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("open netlink in %s: %w", s.NetnsPath, err)
	}
	return h, nil
}

func isZeroMask(m []byte) bool {
	for _, b := range m {
		if b != 0 {
			return false
		}
	}
	return true
}

// readSpeed returns the speed in Mbit/s, or 0 when the file is absent,
// unreadable (EINVAL while the link is down) or says -1/0.
func readSpeed(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 || v == int64(^uint32(0)) {
		return 0 // SPEED_UNKNOWN is -1, or 4294967295 through some drivers
	}
	return v
}
