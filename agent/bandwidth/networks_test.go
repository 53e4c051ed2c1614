package bandwidth

import (
	"net"
	"reflect"
	"strings"
	"testing"

	"sextant.io/sextant/api/annotations"
)

func TestParseNetworks(t *testing.T) {
	got, err := ParseNetworks([]string{"storage=eth2", "pod = bond0", "sriov=ens1f*, ens2f0"})
	if err != nil {
		t.Fatal(err)
	}
	want := []NetworkSpec{{"storage", []string{"eth2"}}, {"pod", []string{"bond0"}}, {"sriov", []string{"ens1f*", "ens2f0"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, tc := range []struct{ value, want string }{
		{"storage", "want NAME=IFACE"},
		{"=eth0", "want NAME=IFACE"},
		{"storage=", "want NAME=IFACE"},
		{"Storage=eth2", `"Storage" is not a DNS label`},
		{"st_1=eth2", "not a DNS label"},
		{"storage=eth[", `"eth[" is not an interface name or pattern`},
		{"storage=eth2,", `"" is not an interface name or pattern`},
	} {
		_, err := ParseNetworks([]string{tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--network") {
			t.Errorf("%q: err %v, want one naming --network and containing %q", tc.value, err, tc.want)
		}
	}
	if _, err := ParseNetworks([]string{"storage=eth2", "storage=eth3"}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a network given twice: %v", err)
	}
}

// nodeLinks is a node cabled as bonded, multi-homed nodes are: two NICs bonded, a VLAN
// on the bond carrying the default route, a bridge over a third NIC with pod veths on
// it, two separate storage NICs, and the loopback.
func nodeLinks() []Link {
	return []Link{
		{Name: "lo", Index: 1, Kind: "device", Up: true},
		{Name: "eth0", Index: 2, Kind: "device", Physical: true, Up: true, SpeedMbps: 10000, MasterIndex: 10},
		{Name: "eth1", Index: 3, Kind: "device", Physical: true, Up: true, SpeedMbps: 10000, MasterIndex: 10},
		{Name: "bond0", Index: 10, Kind: "bond", Up: true},
		{Name: "bond0.100", Index: 11, Kind: "vlan", Up: true, ParentIndex: 10, DefaultRoute: true, Addrs: []net.IP{net.ParseIP("10.0.0.5")}},
		{Name: "eth2", Index: 4, Kind: "device", Physical: true, Up: true, SpeedMbps: 25000, MasterIndex: 20},
		{Name: "br0", Index: 20, Kind: "bridge", Up: true, Addrs: []net.IP{net.ParseIP("192.168.7.5")}},
		{Name: "veth1", Index: 21, Kind: "veth", Up: true, MasterIndex: 20},
		{Name: "eth3", Index: 5, Kind: "device", Physical: true, Up: true, SpeedMbps: 10000},
		{Name: "eth4", Index: 6, Kind: "device", Physical: true, Up: true, SpeedMbps: 10000},
	}
}

func names(links []Link) []string {
	out := make([]string, len(links))
	for i, l := range links {
		out[i] = l.Name
	}
	return out
}

func TestGroupNetworks(t *testing.T) {
	links := nodeLinks()
	for _, tc := range []struct {
		name    string
		specs   []NetworkSpec
		nodeIPs []net.IP
		want    map[string][]string
	}{
		{"default route over a VLAN on a bond: the bond, once", nil, nil,
			map[string][]string{"pod": {"bond0"}}},
		{"a slave named: its bond", []NetworkSpec{{"pod", []string{"eth0", "eth1"}}}, nil,
			map[string][]string{"pod": {"bond0"}}},
		{"a bridge: its NIC, not the pods' veths", []NetworkSpec{{"backup", []string{"br0"}}}, nil,
			map[string][]string{"pod": {"bond0"}, "backup": {"eth2"}}},
		{"two separate NICs in one network", []NetworkSpec{{"storage", []string{"eth3", "eth4"}}}, nil,
			map[string][]string{"pod": {"bond0"}, "storage": {"eth3", "eth4"}}},
		{"patterns", []NetworkSpec{{"storage", []string{"eth[34]"}}}, nil,
			map[string][]string{"pod": {"bond0"}, "storage": {"eth3", "eth4"}}},
		{"the Node's IP on another interface than the default route", nil, []net.IP{net.ParseIP("192.168.7.5")},
			map[string][]string{"pod": {"eth2"}}},
		{"the Node's IP on the default route's interface", nil, []net.IP{net.ParseIP("10.0.0.5")},
			map[string][]string{"pod": {"bond0"}}},
		{"--network pod overrides the automatic choice", []NetworkSpec{{"pod", []string{"eth3"}}}, []net.IP{net.ParseIP("10.0.0.5")},
			map[string][]string{"pod": {"eth3"}}},
		{"a pattern matching nothing", []NetworkSpec{{"storage", []string{"ib*"}}}, nil,
			map[string][]string{"pod": {"bond0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string][]string{}
			for name, members := range groupNetworks(links, tc.specs, tc.nodeIPs) {
				got[name] = names(members)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A bridge whose uplink is a VLAN resolves to the NIC or bond under the VLAN: the
// bridge's own hooks see only the host stack's traffic, and it has no speed. A VLAN
// over a pod's veth is no uplink.
func TestGroupNetworksBridgeOverVLAN(t *testing.T) {
	nodeIP := net.ParseIP("10.0.0.5")
	for _, tc := range []struct {
		name  string
		links []Link
		want  []string
	}{
		{"over a NIC", []Link{
			{Name: "eth0", Index: 2, Kind: "device", Physical: true, Up: true, SpeedMbps: 25000},
			{Name: "eth0.100", Index: 3, Kind: "vlan", Up: true, ParentIndex: 2, MasterIndex: 4},
			{Name: "br0", Index: 4, Kind: "bridge", Up: true, Addrs: []net.IP{nodeIP}, DefaultRoute: true},
			{Name: "veth1", Index: 5, Kind: "veth", Up: true, MasterIndex: 4},
		}, []string{"eth0"}},
		{"over a bond", []Link{
			{Name: "eth0", Index: 2, Kind: "device", Physical: true, Up: true, SpeedMbps: 10000, MasterIndex: 10},
			{Name: "eth1", Index: 3, Kind: "device", Physical: true, Up: true, SpeedMbps: 10000, MasterIndex: 10},
			{Name: "bond0", Index: 10, Kind: "bond", Up: true},
			{Name: "bond0.7", Index: 11, Kind: "vlan", Up: true, ParentIndex: 10, MasterIndex: 20},
			{Name: "br0", Index: 20, Kind: "bridge", Up: true, Addrs: []net.IP{nodeIP}},
		}, []string{"bond0"}},
		{"a VLAN over a pod's veth only", []Link{
			{Name: "eth0", Index: 2, Kind: "device", Physical: true, Up: true, SpeedMbps: 25000},
			{Name: "veth1", Index: 5, Kind: "veth", Up: true},
			{Name: "veth1.5", Index: 6, Kind: "vlan", Up: true, ParentIndex: 5, MasterIndex: 4},
			{Name: "br0", Index: 4, Kind: "bridge", Up: true, Addrs: []net.IP{nodeIP}},
		}, []string{"br0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := groupNetworks(tc.links, nil, []net.IP{nodeIP})
			if !reflect.DeepEqual(names(got[annotations.PodNetwork]), tc.want) || len(got) != 1 {
				t.Errorf("networks %v, want the pod network on %v", got, tc.want)
			}
		})
	}
}

// TestMeteredLinksCountOnce: with the default selection (physical NICs and the default
// route's interface), a bond's slaves are metered as the bond, and the VLAN on it not
// at all, so the same bytes are never counted twice.
func TestMeteredLinksCountOnce(t *testing.T) {
	m := New(Config{Networks: []NetworkSpec{{"storage", []string{"eth3", "eth4"}}}}, nil, nil, nil, nil)
	metered, networks := m.meteredLinks(nodeLinks())
	var got []string
	for _, l := range nodeLinks() {
		if _, ok := metered[l.Index]; ok {
			got = append(got, l.Name)
		}
	}
	if want := []string{"bond0", "eth2", "eth3", "eth4"}; !reflect.DeepEqual(got, want) {
		t.Errorf("metered %v, want %v", got, want)
	}
	if want := []NetworkSample{{"pod", []string{"bond0"}}, {"storage", []string{"eth3", "eth4"}}}; !reflect.DeepEqual(networks, want) {
		t.Errorf("networks %+v, want %+v", networks, want)
	}
}

// TestBondCapacity: a bond's own speed, else the sum of its up slaves' speeds.
func TestBondCapacity(t *testing.T) {
	m := New(Config{}, nil, nil, nil, nil)
	links := nodeLinks()
	bond := links[3]
	if c := m.capacity(bond, links); c.Ingress != 20e9 || c.Egress != 20e9 {
		t.Errorf("bond without a speed: %+v, want the slaves' 20G", c)
	}
	links[2].Up = false
	if c := m.capacity(bond, links); c.Ingress != 10e9 {
		t.Errorf("one slave down: %+v, want 10G", c)
	}
	bond.SpeedMbps = 15000
	if c := m.capacity(bond, links); c.Ingress != 15e9 {
		t.Errorf("bond reporting 15000: %+v, want 15G", c)
	}
	veth := Link{Name: "veth1", Kind: "veth", SpeedMbps: 10000}
	if c := m.capacity(veth, links); c.Ingress != 0 {
		t.Errorf("a veth's made-up speed counted: %+v", c)
	}
}
