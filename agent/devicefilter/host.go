package devicefilter

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	"sextant.io/sextant/agent/topology"
	"sextant.io/sextant/api/annotations"
)

// maxStackDepth bounds the walk through stacked interfaces (VLAN on bond on NIC) and
// stacked block devices (LVM on md on partitions): real stacks are a few deep, and a
// loop in a copied tree must not hang the agent.
const maxStackDepth = 8

// Host is what a scan found the node itself runs on.
type Host struct {
	// Devices maps the PCI address of each host device to why it is one.
	Devices map[string]string
	// RoutesKnown: a route table was read, so NICs not in Devices are not the host's.
	RoutesKnown bool
	// MountsKnown: a mount table was read, so drives not in Devices back no filesystem.
	MountsKnown bool
}

// ScanHost finds the host's NICs and drives under root (the directory holding sys/ and
// proc/). nodeAddrs are the node's own addresses (its Node's InternalIP and ExternalIP);
// none is fine. A missing file is no data; malformed content is skipped with a warning
// naming the file.
func ScanHost(root string, nodeAddrs []netip.Addr) (Host, []error) {
	s := scan{root: root, host: Host{Devices: map[string]string{}}}
	s.nics(nodeAddrs)
	s.disks()
	return s.host, s.warnings
}

type scan struct {
	root     string
	host     Host
	warnings []error
}

func (s *scan) warn(err error) { s.warnings = append(s.warnings, err) }

func (s *scan) display(rel string) string { return path.Join(s.root, rel) }

// read returns a file's content; ok is false when it is missing (no data) or unreadable
// (a warning).
func (s *scan) read(rel string) (string, bool) {
	c, err := topology.ReadFile(s.root, rel)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.warn(err)
		}
		return "", false
	}
	return c, true
}

func (s *scan) add(addr, reason string) {
	if _, ok := s.host.Devices[addr]; !ok {
		s.host.Devices[addr] = reason
	}
}

// route is one entry of a routing table.
type route struct {
	iface  string
	prefix netip.Prefix
}

// Route flags (linux/route.h): only usable routes say where traffic leaves.
const (
	rtfUp     = 0x0001
	rtfReject = 0x0200
)

func (s *scan) nics(nodeAddrs []netip.Addr) {
	var routes []route
	if c, ok := s.read("proc/net/route"); ok {
		s.host.RoutesKnown = true
		routes = append(routes, s.parseRoute4(c)...)
	}
	if c, ok := s.read("proc/net/ipv6_route"); ok {
		s.host.RoutesKnown = true
		routes = append(routes, s.parseRoute6(c)...)
	}
	for _, r := range routes {
		if r.prefix.Bits() == 0 {
			s.nic(r.iface, "the default route leaves through "+r.iface)
		}
	}
	var inet6 map[netip.Addr]string
	if c, ok := s.read("proc/net/if_inet6"); ok {
		inet6 = s.parseInet6(c)
	}
	for _, a := range nodeAddrs {
		a = a.Unmap()
		if iface, ok := inet6[a]; ok {
			s.nic(iface, fmt.Sprintf("it carries the node's address %s", a))
			continue
		}
		if iface, ok := longestMatch(routes, a); ok {
			s.nic(iface, fmt.Sprintf("it carries the node's address %s", a))
		}
	}
}

// longestMatch is the interface the routing table reaches a through: a node address
// configured as /32 with a gateway (clouds) sits on the interface of the route that
// covers it, the default one at worst.
func longestMatch(routes []route, a netip.Addr) (string, bool) {
	best, bits := "", -1
	for _, r := range routes {
		if r.prefix.Contains(a) && r.prefix.Bits() > bits {
			best, bits = r.iface, r.prefix.Bits()
		}
	}
	return best, bits >= 0
}

// parseRoute4 reads proc/net/route: Iface Destination Gateway Flags RefCnt Use Metric
// Mask ..., addresses as little-endian hex.
func (s *scan) parseRoute4(c string) []route {
	var out []route
	bad := false
	for i, line := range strings.Split(c, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) == 0 {
			continue // the header
		}
		if len(f) < 8 {
			bad = true
			continue
		}
		dst, err1 := hexLE32(f[1])
		flags, err2 := strconv.ParseUint(f[3], 16, 32)
		mask, err3 := hexLE32(f[7])
		if err1 != nil || err2 != nil || err3 != nil {
			bad = true
			continue
		}
		if flags&rtfUp == 0 || flags&rtfReject != 0 || f[0] == "lo" {
			continue
		}
		bits := 0
		for m := binary.BigEndian.Uint32(mask[:]); m&0x80000000 != 0; m <<= 1 {
			bits++
		}
		p, err := netip.AddrFrom4(dst).Prefix(bits)
		if err != nil {
			bad = true
			continue
		}
		out = append(out, route{iface: f[0], prefix: p})
	}
	if bad {
		s.warn(fmt.Errorf("parsing %s: lines that are not routes skipped", s.display("proc/net/route")))
	}
	return out
}

// hexLE32 turns the kernel's little-endian hex of an IPv4 address into its bytes.
func hexLE32(h string) ([4]byte, error) {
	var b [4]byte
	if len(h) != 8 {
		return b, errors.New("not 8 hex digits")
	}
	v, err := strconv.ParseUint(h, 16, 32)
	if err != nil {
		return b, err
	}
	binary.LittleEndian.PutUint32(b[:], uint32(v))
	return b, nil
}

// parseRoute6 reads proc/net/ipv6_route: destination, prefix length, source, its
// length, next hop, metric, refcount, use, flags, interface.
func (s *scan) parseRoute6(c string) []route {
	var out []route
	bad := false
	for line := range strings.SplitSeq(c, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 10 {
			bad = true
			continue
		}
		dst, err1 := hex16(f[0])
		bits, err2 := strconv.ParseUint(f[1], 16, 8)
		flags, err3 := strconv.ParseUint(f[8], 16, 32)
		if err1 != nil || err2 != nil || err3 != nil || bits > 128 {
			bad = true
			continue
		}
		if flags&rtfUp == 0 || flags&rtfReject != 0 || f[9] == "lo" {
			continue
		}
		p, err := netip.AddrFrom16(dst).Prefix(int(bits))
		if err != nil {
			bad = true
			continue
		}
		out = append(out, route{iface: f[9], prefix: p})
	}
	if bad {
		s.warn(fmt.Errorf("parsing %s: lines that are not routes skipped", s.display("proc/net/ipv6_route")))
	}
	return out
}

func hex16(h string) ([16]byte, error) {
	var b [16]byte
	if len(h) != 32 {
		return b, errors.New("not 32 hex digits")
	}
	_, err := hex.Decode(b[:], []byte(h))
	return b, err
}

// parseInet6 reads proc/net/if_inet6: address, ifindex, prefix length, scope, flags,
// interface.
func (s *scan) parseInet6(c string) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	bad := false
	for line := range strings.SplitSeq(c, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		b, err := hex16(f[0])
		if len(f) < 6 || err != nil {
			bad = true
			continue
		}
		out[netip.AddrFrom16(b)] = f[5]
	}
	if bad {
		s.warn(fmt.Errorf("parsing %s: lines that are not addresses skipped", s.display("proc/net/if_inet6")))
	}
	return out
}

// nic marks the PCI functions under an interface: its own, or those of the interfaces
// below a bond, VLAN or bridge.
func (s *scan) nic(iface, why string) {
	for _, name := range s.lowerInterfaces(iface, 0, map[string]bool{}) {
		addr, err := topology.PCIFunctionOf(s.root, "sys/class/net/"+name+"/device")
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				s.warn(err)
			}
			continue
		}
		if addr == "" {
			continue
		}
		reason := "host NIC " + name + ": " + why
		s.add(addr, reason)
	}
}

// lowerInterfaces returns iface and every interface below it.
func (s *scan) lowerInterfaces(iface string, depth int, seen map[string]bool) []string {
	if seen[iface] || depth > maxStackDepth || strings.ContainsAny(iface, "/") || iface == "." || iface == ".." {
		return nil
	}
	seen[iface] = true
	out := []string{iface}
	dir := "sys/class/net/" + iface
	names, err := topology.ReadDir(s.root, dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.warn(err)
		}
		return out
	}
	var lower []string
	for _, n := range names {
		if l, ok := strings.CutPrefix(n, "lower_"); ok {
			lower = append(lower, l)
		}
	}
	// Bridge ports are in brif/ (and, on newer kernels, lower_ links too).
	if ports, err := topology.ReadDir(s.root, dir+"/brif"); err == nil {
		lower = append(lower, ports...)
	}
	slices.Sort(lower)
	for _, l := range slices.Compact(lower) {
		out = append(out, s.lowerInterfaces(l, depth+1, seen)...)
	}
	return out
}

func (s *scan) disks() {
	for _, f := range []string{"proc/1/mountinfo", "proc/self/mountinfo"} {
		c, ok := s.read(f)
		if !ok {
			continue
		}
		s.host.MountsKnown = true
		bad := false
		for line := range strings.SplitSeq(c, "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			m, ok := parseMountinfo(line)
			if !ok {
				bad = true
				continue
			}
			why := "backs the filesystem mounted at " + m.point
			switch {
			case m.major != "0":
				s.disk("sys/dev/block/"+m.major+":"+m.minor, why)
			case strings.HasPrefix(m.source, "/dev/"):
				// btrfs and the like report an anonymous device number.
				s.diskByName(m.source, why)
			}
		}
		if bad {
			s.warn(fmt.Errorf("parsing %s: lines that are not mounts skipped", s.display(f)))
		}
	}
	if c, ok := s.read("proc/swaps"); ok {
		for i, line := range strings.Split(c, "\n") {
			f := strings.Fields(line)
			if i == 0 || len(f) == 0 || !strings.HasPrefix(f[0], "/dev/") {
				continue // the header, or a swap file (its filesystem is mounted)
			}
			s.diskByName(unescapeOctal(f[0]), "holds swap "+f[0])
		}
	}
}

type mount struct {
	major, minor  string
	point, source string
}

// parseMountinfo reads one proc/PID/mountinfo line: ID PARENT MAJ:MIN ROOT POINT
// OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS.
func parseMountinfo(line string) (mount, bool) {
	f := strings.Fields(line)
	sep := slices.Index(f, "-")
	if len(f) < 6 || sep < 6 || sep+2 >= len(f) {
		return mount{}, false
	}
	major, minor, ok := strings.Cut(f[2], ":")
	if !ok {
		return mount{}, false
	}
	if _, err := strconv.ParseUint(major, 10, 32); err != nil {
		return mount{}, false
	}
	if _, err := strconv.ParseUint(minor, 10, 32); err != nil {
		return mount{}, false
	}
	return mount{major: major, minor: minor, point: unescapeOctal(f[4]), source: unescapeOctal(f[sep+2])}, true
}

// unescapeOctal undoes the kernel's \NNN escapes of spaces, tabs and backslashes.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// diskByName finds a block device from a /dev path: its name in sys/class/block, or,
// for /dev/mapper/NAME, the dm-N whose dm/name is NAME. Other links under /dev
// (by-uuid, by-id) live on the host's /dev and are not followed.
func (s *scan) diskByName(dev, why string) {
	name := path.Base(dev)
	if _, err := topology.Resolve(s.root, "sys/class/block/"+name); err == nil {
		s.disk("sys/class/block/"+name, why)
		return
	}
	if !strings.HasPrefix(dev, "/dev/mapper/") {
		return
	}
	names, err := topology.ReadDir(s.root, "sys/class/block")
	if err != nil {
		return
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "dm-") {
			continue
		}
		if dm, ok := s.read("sys/class/block/" + n + "/dm/name"); ok && dm == name {
			s.disk("sys/class/block/"+n, why)
			return
		}
	}
}

// disk marks the PCI functions under a block device: the one above it, or those of the
// devices it is built from.
func (s *scan) disk(rel, why string) {
	for _, dev := range s.blockStack(rel, 0) {
		s.add(dev.addr, "host disk "+dev.name+": "+why)
	}
}

type blockDev struct{ name, addr string }

// blockStack returns the PCI functions of the disks under the block device rel.
func (s *scan) blockStack(rel string, depth int) []blockDev {
	if depth > maxStackDepth {
		return nil
	}
	p, err := topology.Resolve(s.root, rel)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.warn(err)
		}
		return nil
	}
	comps := strings.Split(p, "/")
	for i := len(comps) - 1; i >= 0; i-- {
		if annotations.IsPCIAddress(comps[i]) {
			return []blockDev{{name: path.Base(p), addr: comps[i]}}
		}
	}
	// Virtual: device-mapper, md. A partition of one lists its slaves on the whole
	// device, one directory up.
	dirs := []string{p}
	if _, err := topology.ReadFile(s.root, p+"/partition"); err == nil {
		dirs = append(dirs, path.Dir(p))
	}
	var out []blockDev
	for _, d := range dirs {
		slaves, err := topology.ReadDir(s.root, d+"/slaves")
		if err != nil {
			continue
		}
		for _, sl := range slaves {
			out = append(out, s.blockStack(d+"/slaves/"+sl, depth+1)...)
		}
	}
	return out
}
