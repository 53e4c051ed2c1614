package devicefilter

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzProcNet: the route tables and IPv6 addresses come from the node's /proc, which
// the agent reads as found. Whatever they hold, parsing never panics, every route is a
// valid prefix on a named interface, the longest match of any address is one of them,
// and malformed lines are warned about rather than taken.
func FuzzProcNet(f *testing.F) {
	f.Add("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"+
		"eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"+
		"eth0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n",
		"fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 eth0\n",
		"fe80000000000000020c29fffe123456 02 40 20 80 eth0\n", "10.0.0.7")
	f.Add("", "", "", "::1")
	f.Add("h\neth0 zz 0 1 0 0 0 ffffffff\n", "x 81 0 0 0 0 0 0 1 lo\n", "short\n", "not an address")
	f.Add("h\neth0 0000000A 0 0001 0 0 0 FFFF00FF\n", "00000000000000000000000000000000 80 0 0 0 0 0 0 1 eth1\n", "", "0.0.0.0")
	f.Fuzz(func(t *testing.T, route4, route6, inet6, addr string) {
		s := &scan{root: "/", host: Host{Devices: map[string]string{}}}
		routes := append(s.parseRoute4(route4), s.parseRoute6(route6)...)
		for _, r := range routes {
			if !r.prefix.IsValid() || r.iface == "" || strings.ContainsAny(r.iface, " \t\n") {
				t.Fatalf("route %+v", r)
			}
		}
		for a, iface := range s.parseInet6(inet6) {
			if !a.Is6() || iface == "" {
				t.Fatalf("address %v on %q", a, iface)
			}
		}
		if a, err := netip.ParseAddr(addr); err == nil {
			if iface, ok := longestMatch(routes, a); ok && !containsIface(routes, iface, a) {
				t.Fatalf("longest match of %v is %q, which has no route holding it", a, iface)
			}
		}
		lines := func(c string, header bool) int {
			n := 0
			for i, l := range strings.Split(c, "\n") {
				if strings.TrimSpace(l) != "" && !(header && i == 0) {
					n++
				}
			}
			return n
		}
		if len(routes) > lines(route4, true)+lines(route6, false) {
			t.Fatalf("%d routes from %d lines", len(routes), lines(route4, true)+lines(route6, false))
		}
	})
}

func containsIface(routes []route, iface string, a netip.Addr) bool {
	for _, r := range routes {
		if r.iface == iface && r.prefix.Contains(a) {
			return true
		}
	}
	return false
}

// FuzzMountinfo: a line of /proc/PID/mountinfo. Parsing never panics, and a line it
// takes has numeric major and minor numbers and a mount point.
func FuzzMountinfo(f *testing.F) {
	for _, s := range []string{
		`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`,
		`22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw`,
		`25 22 0:22 / /mnt/with\040space rw - tmpfs tmp\134fs rw`,
		`1 2 3:4 / / - x`, `1 2 x:4 / / o - t s o`, `- - - - - - - - -`, ``, `\`, `\1`, `\777\0400`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		m, ok := parseMountinfo(line)
		if !ok {
			return
		}
		if m.major == "" || m.minor == "" || strings.Trim(m.major+m.minor, "0123456789") != "" {
			t.Fatalf("parseMountinfo(%q) = %+v", line, m)
		}
		if len(unescapeOctal(line)) > len(line) {
			t.Fatalf("unescaping %q made it longer", line)
		}
	})
}
