package devicefilter

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/internal/fixture"
)

// The devices of testdata/host, by what the tree makes of them.
var hostTreeDevices = []v1alpha1.PCIDevice{
	{Address: "0000:02:00.0", Kind: v1alpha1.KindNIC, Driver: "igb"},
	{Address: "0000:03:00.0", Kind: v1alpha1.KindNIC, Driver: "mlx5_core"},
	{Address: "0000:03:00.1", Kind: v1alpha1.KindNIC, Driver: "mlx5_core"},
	{Address: "0000:04:00.0", Kind: v1alpha1.KindNIC, Driver: "ice"},
	{Address: "0000:04:00.1", Kind: v1alpha1.KindNIC, Driver: "ice"},
	{Address: "0000:05:00.0", Kind: v1alpha1.KindNVMe, Driver: "nvme"},
	{Address: "0000:06:00.0", Kind: v1alpha1.KindNVMe, Driver: "nvme"},
	{Address: "0000:07:00.0", Kind: v1alpha1.KindNVMe, Driver: "nvme"},
	{Address: "0000:08:00.0", Kind: v1alpha1.KindNVMe, Driver: "nvme"},
	{Address: "0000:09:00.0", Kind: v1alpha1.KindNVMe, Driver: "nvme"},
	{Address: "0000:81:00.0", Kind: v1alpha1.KindGPU, Driver: "nvidia"},
}

var nodeAddrs = []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("2001:db8:0:1::5"), netip.MustParseAddr("10.2.0.9")}

func TestScanHost(t *testing.T) {
	host, warnings := ScanHost("testdata/host", nodeAddrs)
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	if !host.RoutesKnown || !host.MountsKnown {
		t.Errorf("routes known %v, mounts known %v; want both", host.RoutesKnown, host.MountsKnown)
	}
	want := map[string]string{
		"0000:02:00.0": "host NIC eth0: the default route leaves through eth0",
		"0000:03:00.0": "host NIC eth1: it carries the node's address 10.1.0.5",
		"0000:04:00.0": "host NIC ens4: the default route leaves through br0",
		"0000:04:00.1": "host NIC ens5: it carries the node's address 2001:db8:0:1::5",
		"0000:05:00.0": "host disk nvme0n1p1: backs the filesystem mounted at /",
		"0000:06:00.0": "host disk nvme1n1p1: backs the filesystem mounted at /var/lib/containerd",
		"0000:07:00.0": "host disk nvme2n1: holds swap /dev/nvme2n1",
		"0000:08:00.0": "host disk nvme3n1: backs the filesystem mounted at /host/data dir",
	}
	for addr, reason := range want {
		if host.Devices[addr] != reason {
			t.Errorf("%s: %q, want %q", addr, host.Devices[addr], reason)
		}
	}
	for addr, reason := range host.Devices {
		if _, ok := want[addr]; !ok {
			t.Errorf("%s is a host device (%s), want it free", addr, reason)
		}
	}
}

func TestScanHostWithoutNodeAddresses(t *testing.T) {
	host, _ := ScanHost("testdata/host", nil)
	for _, addr := range []string{"0000:03:00.0", "0000:04:00.1"} {
		if r, ok := host.Devices[addr]; ok {
			t.Errorf("%s excluded (%s) though no node address was given", addr, r)
		}
	}
	if _, ok := host.Devices["0000:02:00.0"]; !ok {
		t.Error("the default-route NIC is not excluded")
	}
}

func TestSelector(t *testing.T) {
	rules := func(s string) Rules {
		rs, err := ParseRules(s)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	free := func(excluded map[string]string) []string {
		var out []string
		for _, d := range hostTreeDevices {
			if _, ok := excluded[d.Address]; !ok {
				out = append(out, d.Address)
			}
		}
		return out
	}
	tests := []struct {
		name  string
		root  string
		rules Rules
		want  string // the free devices, comma-separated
		// reason is a device and a text its reason must contain.
		reason [2]string
	}{
		{name: "host defaults", root: "testdata/host",
			want: "0000:03:00.1,0000:09:00.0,0000:81:00.0"},
		{name: "include a host NIC by address", root: "testdata/host", rules: rules("include:address=0000:02:00.0"),
			want: "0000:02:00.0,0000:03:00.1,0000:09:00.0,0000:81:00.0"},
		{name: "exclude a kind", root: "testdata/host", rules: rules("exclude:kind=gpu"),
			want: "0000:03:00.1,0000:09:00.0", reason: [2]string{"0000:81:00.0", "rule exclude:kind=gpu"}},
		{name: "exclude a driver, then include one address of it: last match wins", root: "testdata/host",
			rules: rules("exclude:driver=mlx5_core,include:address=0000:03:00.1"),
			want:  "0000:03:00.1,0000:09:00.0,0000:81:00.0"},
		{name: "include then exclude: last match wins", root: "testdata/host",
			rules: rules("include:address=0000:03:00.1,exclude:driver=mlx5_core"),
			want:  "0000:09:00.0,0000:81:00.0"},
		{name: "no proc: NICs and drives held back", root: "testdata/no-proc",
			want:   "0000:81:00.0",
			reason: [2]string{"0000:02:00.0", "no route table"}},
		{name: "no proc, drives included by rule", root: "testdata/no-proc", rules: rules("include:kind=nvme"),
			want:   "0000:05:00.0,0000:06:00.0,0000:07:00.0,0000:08:00.0,0000:09:00.0,0000:81:00.0",
			reason: [2]string{"0000:03:00.1", "no route table"}},
	}
	noProc := filepath.Join(t.TempDir(), "no-proc")
	fixture.CopyTree(t, "testdata/host/sys", filepath.Join(noProc, "sys"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := tt.root
			if root == "testdata/no-proc" {
				root = noProc
			}
			s := &Selector{Root: root, Rules: tt.rules, NodeAddresses: func() []netip.Addr { return nodeAddrs }}
			excluded, warnings := s.Excluded(hostTreeDevices)
			if len(warnings) != 0 {
				t.Errorf("warnings: %v", warnings)
			}
			if got := strings.Join(free(excluded), ","); got != tt.want {
				t.Errorf("free = %s, want %s; excluded: %v", got, tt.want, excluded)
			}
			if tt.reason[0] != "" && !strings.Contains(excluded[tt.reason[0]], tt.reason[1]) {
				t.Errorf("%s excluded for %q, want a reason containing %q", tt.reason[0], excluded[tt.reason[0]], tt.reason[1])
			}
		})
	}
}

func TestScanHostMalformed(t *testing.T) {
	root := t.TempDir()
	fixture.CopyTree(t, "testdata/host", root)
	write := func(rel, s string) {
		if err := os.WriteFile(filepath.Join(root, rel), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/net/route", "Iface\tDestination\nnonsense\neth0\tzz\t0\t0003\t0\t0\t0\t00000000\n")
	write("proc/net/ipv6_route", "short line\n")
	write("proc/net/if_inet6", "xyz 1 2 3 4 ens5\n")
	write("proc/1/mountinfo", "garbage\n22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw\n")
	host, warnings := ScanHost(root, nodeAddrs)
	for _, f := range []string{"proc/net/route", "proc/net/ipv6_route", "proc/net/if_inet6", "proc/1/mountinfo"} {
		found := false
		for _, w := range warnings {
			found = found || strings.Contains(w.Error(), f)
		}
		if !found {
			t.Errorf("no warning naming %s: %v", f, warnings)
		}
	}
	// The good line still counts.
	if _, ok := host.Devices["0000:05:00.0"]; !ok {
		t.Errorf("the root disk is not excluded past a malformed line: %v", host.Devices)
	}
}

// A loop of lower_ links in a copied tree must end.
func TestScanHostInterfaceLoop(t *testing.T) {
	root := t.TempDir()
	fixture.CopyTree(t, "testdata/host", root)
	if err := os.Symlink("../ens4.100", filepath.Join(root, "sys/devices/virtual/net/br0/lower_br0")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../br0", filepath.Join(root, "sys/devices/virtual/net/ens4.100/lower_br0")); err != nil {
		t.Fatal(err)
	}
	host, _ := ScanHost(root, nil)
	if _, ok := host.Devices["0000:04:00.0"]; !ok {
		t.Errorf("ens4 under the loop not found: %v", host.Devices)
	}
}

func TestParseRule(t *testing.T) {
	good := map[string]Rule{
		"include:address=0000:3b:00.0":  {Include: true, Field: "address", Value: "0000:3b:00.0"},
		"exclude:kind=nvme":             {Field: "kind", Value: "nvme"},
		" exclude:driver=mlx5_core ":    {Field: "driver", Value: "mlx5_core"},
		"include:address=10000:00:01.0": {Include: true, Field: "address", Value: "10000:00:01.0"},
	}
	for in, want := range good {
		got, err := ParseRule(in)
		if err != nil || got != want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                             "no include: or exclude:",
		"drop:kind=gpu":                `"drop" is neither include nor exclude`,
		"exclude:kind":                 "no FIELD=VALUE",
		"exclude:kind=":                "no FIELD=VALUE",
		"exclude:kind=other":           `kind "other" is not one of`,
		"exclude:kind=fpga":            `kind "fpga" is not one of`,
		"exclude:address=0000:3B:00.0": "is not a PCI address",
		"exclude:address=3b:00.0":      "is not a PCI address",
		"exclude:driver=a b":           "is not a kernel driver name",
		"exclude:vendor=0x10de":        `field "vendor" is not address, kind or driver`,
	}
	for in, want := range bad {
		_, err := ParseRule(in)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "the accepted form is") || !strings.Contains(err.Error(), in) {
			t.Errorf("ParseRule(%q) error = %v, want one naming the rule, saying %q and giving the accepted form", in, err, want)
		}
	}
}

func TestRulesFlag(t *testing.T) {
	var rs Rules
	if err := rs.Set("exclude:kind=nic, include:address=0000:02:00.0"); err != nil {
		t.Fatal(err)
	}
	if err := rs.Set("exclude:driver=nvme"); err != nil {
		t.Fatal(err)
	}
	if got, want := rs.String(), "exclude:kind=nic,include:address=0000:02:00.0,exclude:driver=nvme"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if err := rs.Set("exclude:kind=gpu,bogus"); err == nil || len(rs) != 3 {
		t.Errorf("Set with a bad rule: %v, %d rules; want an error and nothing added", err, len(rs))
	}
	if rs.Type() == "" {
		t.Error("no type name")
	}
}

func TestUnescapeOctal(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/a\134b`: `/a\b`, `/a\04`: `/a\04`, `/a\`: `/a\`, `/plain`: "/plain"} {
		if got := unescapeOctal(in); got != want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", in, got, want)
		}
	}
}
