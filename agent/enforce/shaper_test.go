//go:build linux

package enforce

import (
	"errors"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/internal/netnstest"
)

// shaperNetns makes a namespace with a veth pair whose end up0 the tests shape, with
// the given root qdisc (tc arguments after "root"; none for the kernel's default).
func shaperNetns(t testing.TB, root ...string) (ns, path string) {
	t.Helper()
	ns, path = netnstest.New(t, "sx-shape-")
	netnstest.Run(t, "ip", "-n", ns, "link", "add", "up0", "numtxqueues", "4", "type", "veth", "peer", "name", "w0")
	netnstest.Run(t, "ip", "-n", ns, "link", "set", "up0", "up")
	netnstest.Run(t, "ip", "-n", ns, "link", "set", "w0", "up")
	if len(root) > 0 {
		netnstest.Run(t, "tc", append([]string{"-n", ns, "qdisc", "add", "dev", "up0", "root"}, root...)...)
	}
	return ns, path
}

func newShaper(t testing.TB, path, stateDir string) *Shaper {
	t.Helper()
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	log := logr.Discard()
	if tt, ok := t.(*testing.T); ok {
		log = testr.New(tt)
	}
	s, err := NewShaper(path, stateDir, log)
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.Is(err, os.ErrPermission) && !errors.As(err, &verr) {
			t.Skipf("skipping: loading BPF programs needs CAP_BPF: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rawIn opens a raw netlink socket in the namespace at path.
func rawIn(t *testing.T, path string) rawNetlink {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	sock, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sock.Close)
	return rawNetlink{sockets: map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}}
}

func ifindexIn(t testing.TB, s *Shaper, name string) int {
	t.Helper()
	i, err := s.ifindex(name)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// rootTree is the interface's qdiscs other than ingress/clsact, as the kernel dumps them.
func rootTree(t *testing.T, r rawNetlink, ifindex int) []QdiscConfig {
	t.Helper()
	qs, err := r.dumpQdiscs(ifindex)
	if err != nil {
		t.Fatal(err)
	}
	var out []QdiscConfig
	for _, q := range qs {
		if q.Parent != ingressParent {
			out = append(out, q)
		}
	}
	return out
}

func interfacePlan(name string, egress, ingress []Class) InterfacePlan {
	const rate = 950_000_000
	q := func(pods []Class) QdiscPlan {
		used := uint64(0)
		for _, c := range pods {
			used += c.Rate
		}
		return QdiscPlan{Rate: rate, Default: Class{Minor: DefaultMinor, Rate: rate - used, Ceil: rate}, Pods: pods}
	}
	return InterfacePlan{Name: name, Qdisc: [2]QdiscPlan{Ingress: q(ingress), Egress: q(egress)}}
}

// classRates is the qdisc's classes as minor → [rate, ceil] in bits/s.
func classRates(t *testing.T, h *netlink.Handle, ifindex int) map[uint16][2]uint64 {
	t.Helper()
	cs, err := htb{h: h, ifindex: ifindex}.classes()
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint16][2]uint64{}
	for m, c := range cs {
		out[m] = [2]uint64{c.Rate * 8, c.Ceil * 8}
	}
	return out
}

func TestShapeAndRestore(t *testing.T) {
	for _, tc := range []struct {
		name string
		root []string
	}{
		{"the kernel's default root", nil},
		{"a tbf root", []string{"handle", "7:", "tbf", "rate", "1gbit", "burst", "256k", "latency", "20ms"}},
		{"an mq root with a tbf below", []string{"handle", "9:", "mq"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, path := shaperNetns(t, tc.root...)
			if tc.name == "an mq root with a tbf below" {
				netnstest.Run(t, "tc", "-n", ns, "qdisc", "replace", "dev", "up0", "parent", "9:2", "handle", "12:", "tbf", "rate", "100mbit", "burst", "32k", "latency", "10ms")
			}
			stateDir := t.TempDir()
			s := newShaper(t, path, stateDir)
			r := rawIn(t, path)
			up0 := ifindexIn(t, s, "up0")
			before := rootTree(t, r, up0)

			pod := Class{Minor: 3, Rate: 400e6, Ceil: 950e6, Pod: "a"}
			capped := Class{Minor: 4, Rate: minClassRate, Ceil: 100e6, Pod: "b"}
			if err := s.Shape(interfacePlan("up0", []Class{pod, capped}, []Class{capped})); err != nil {
				t.Fatal(err)
			}
			if err := s.Classify([]Pod{{UID: "a", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}},
				map[types.UID]uint16{"a": 3}); err != nil {
				t.Fatal(err)
			}
			checkShaped(t, s, up0, map[uint16][2]uint64{1: {950e6, 950e6}, 2: {550e6 - minClassRate, 950e6}, 3: {400e6, 950e6}, 4: {minClassRate, 100e6}},
				map[uint16][2]uint64{1: {950e6, 950e6}, 2: {950e6 - minClassRate, 950e6}, 4: {minClassRate, 100e6}})

			// A pod goes, another's rate changes: the classes follow, nothing else moves.
			pod.Rate = 300e6
			if err := s.Shape(interfacePlan("up0", []Class{pod}, nil)); err != nil {
				t.Fatal(err)
			}
			checkShaped(t, s, up0, map[uint16][2]uint64{1: {950e6, 950e6}, 2: {650e6, 950e6}, 3: {300e6, 950e6}},
				map[uint16][2]uint64{1: {950e6, 950e6}, 2: {950e6, 950e6}})

			// A restarted agent: a new shaper, the same state directory. It finds its own
			// qdiscs and filters and makes no second copy of them.
			s2 := newShaper(t, path, stateDir)
			if err := s2.Shape(interfacePlan("up0", []Class{pod}, nil)); err != nil {
				t.Fatal(err)
			}
			checkShaped(t, s2, up0, map[uint16][2]uint64{1: {950e6, 950e6}, 2: {650e6, 950e6}, 3: {300e6, 950e6}},
				map[uint16][2]uint64{1: {950e6, 950e6}, 2: {950e6, 950e6}})

			if err := s2.Unshape("up0"); err != nil {
				t.Fatal(err)
			}
			if after := rootTree(t, r, up0); !reflect.DeepEqual(after, before) {
				t.Errorf("root after unshaping:\n %+v\nwant what it was:\n %+v", after, before)
			}
			if _, err := s2.h.LinkByName(IFBName(up0)); err == nil {
				t.Errorf("IFB %s left behind", IFBName(up0))
			}
			if qs, _ := s2.h.QdiscList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: up0}}); hasKind(qs, "clsact") {
				t.Error("the clsact qdisc the agent added was left behind")
			}
			if len(s2.Shaped()) != 0 {
				t.Errorf("state still holds %v", s2.Shaped())
			}
		})
	}
}

func hasKind(qs []netlink.Qdisc, kind string) bool {
	for _, q := range qs {
		if q.Type() == kind {
			return true
		}
	}
	return false
}

// checkShaped checks the HTB classes of up0 and its IFB, the redirect and the
// classifier's filters: one of each.
func checkShaped(t *testing.T, s *Shaper, up0 int, egress, ingress map[uint16][2]uint64) {
	t.Helper()
	if got := classRates(t, s.h, up0); !reflect.DeepEqual(got, egress) {
		t.Errorf("egress classes %v, want %v", got, egress)
	}
	ifb, err := s.ifindex(IFBName(up0))
	if err != nil {
		t.Fatalf("no IFB: %v", err)
	}
	if got := classRates(t, s.h, ifb); !reflect.DeepEqual(got, ingress) {
		t.Errorf("ingress classes %v, want %v", got, ingress)
	}
	if to, err := redirectTo(s.h, up0); err != nil || to != ifb {
		t.Errorf("the ingress redirect goes to ifindex %d (%v), want the IFB %d", to, err, ifb)
	}
	lnk := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: up0}}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := s.h.FilterList(lnk, parent)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range fs {
			if bf, ok := f.(*netlink.BpfFilter); ok && strings.HasPrefix(bf.Name, ClassifierFilter.NamePrefix) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d classifier filters at parent %#x, want 1", n, parent)
		}
	}
	qs, err := s.h.QdiscList(lnk)
	if err != nil {
		t.Fatal(err)
	}
	roots := 0
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			roots++
		}
	}
	if roots != 1 {
		t.Errorf("%d root qdiscs, want 1", roots)
	}
}

// Someone else's shaping is not the agent's to replace: the interface keeps it, and
// nothing of the agent's is left there.
func TestShapeRefusesForeignClasses(t *testing.T) {
	ns, path := shaperNetns(t, "handle", "1:", "htb", "default", "10")
	netnstest.Run(t, "tc", "-n", ns, "class", "add", "dev", "up0", "parent", "1:", "classid", "1:10", "htb", "rate", "100mbit")
	s := newShaper(t, path, t.TempDir())
	r := rawIn(t, path)
	up0 := ifindexIn(t, s, "up0")
	before := rootTree(t, r, up0)
	err := s.Shape(interfacePlan("up0", nil, nil))
	if !errors.Is(err, ErrForeignShaping) || !strings.Contains(err.Error(), "up0") || !strings.Contains(err.Error(), "htb 1:") {
		t.Fatalf("Shape over another tool's HTB: %v, want ErrForeignShaping naming the interface and its root", err)
	}
	if after := rootTree(t, r, up0); !reflect.DeepEqual(after, before) {
		t.Errorf("the foreign root changed:\n %+v\nwas\n %+v", after, before)
	}
	if len(s.Shaped()) != 0 {
		t.Errorf("state holds %v after a refusal", s.Shaped())
	}
}

// An interface deleted while shaped loses its record and its IFB, and shaping it again
// says it is gone.
func TestShapedInterfaceDeleted(t *testing.T) {
	ns, path := shaperNetns(t)
	s := newShaper(t, path, t.TempDir())
	up0 := ifindexIn(t, s, "up0")
	if err := s.Shape(interfacePlan("up0", nil, nil)); err != nil {
		t.Fatal(err)
	}
	netnstest.Run(t, "ip", "-n", ns, "link", "del", "up0")
	if err := s.Shape(interfacePlan("up0", nil, nil)); !errors.Is(err, ErrInterfaceGone) {
		t.Fatalf("Shape of a deleted interface: %v, want ErrInterfaceGone", err)
	}
	if err := s.Unshape("up0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.h.LinkByName(IFBName(up0)); err == nil {
		t.Error("the deleted interface's IFB is left")
	}
	if len(s.Shaped()) != 0 {
		t.Errorf("state holds %v", s.Shaped())
	}
}
