//go:build linux

package tc

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"

	"sextant.io/sextant/bpf"
	"sextant.io/sextant/internal/netnstest"
)

// testNetns creates a network namespace holding a veth pair (no traffic is
// sent) and removes it when the test ends, whatever happens.
func testNetns(t *testing.T) (path string, ifindex int) {
	t.Helper()
	name, path := netnstest.New(t, "sextant-tc-")
	netnstest.Run(t, "ip", "-n", name, "link", "add", "m0", "type", "veth", "peer", "name", "m1")
	netnstest.Run(t, "ip", "-n", name, "link", "set", "m0", "up")
	h := netnstest.Handle(t, path)
	l, err := h.LinkByName("m0")
	if err != nil {
		t.Fatal(err)
	}
	return path, l.Attrs().Index
}

func loadPrograms(t *testing.T) Programs {
	t.Helper()
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	c, err := bpf.NewCounters()
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			t.Skipf("skipping: loading BPF programs needs CAP_BPF: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p, err := c.LoadPrograms(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return Programs{Ingress: p.SextantIngress, Egress: p.SextantEgress}
}

// ourFilters counts the sextant filters on each clsact hook of the interface.
func ourFilters(t *testing.T, h *netlink.Handle, ifindex int) (ingress, egress int, foreign int) {
	t.Helper()
	l, err := h.LinkByIndex(ifindex)
	if err != nil {
		t.Fatal(err)
	}
	for i, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := h.FilterList(l, parent)
		if err != nil {
			continue
		}
		for _, f := range fs {
			bf, ok := f.(*netlink.BpfFilter)
			switch {
			case ok && strings.HasPrefix(bf.Name, MeterFilter.NamePrefix) && i == 0:
				ingress++
			case ok && strings.HasPrefix(bf.Name, MeterFilter.NamePrefix):
				egress++
			default:
				foreign++
			}
		}
	}
	return
}

func TestClsactReplacesOwnFiltersAndKeepsOthers(t *testing.T) {
	path, ifindex := testNetns(t)
	progs := loadPrograms(t)
	h := netnstest.Handle(t, path)

	// Someone else's filter, which must survive everything we do.
	netnstest.Run(t, "ip", "netns", "exec", strings.TrimPrefix(path, "/var/run/netns/"), "tc", "qdisc", "add", "dev", "m0", "clsact")
	foreign := filterFor(MeterFilter, ifindex, netlink.HANDLE_MIN_INGRESS, "foreign", loadPrograms(t).Ingress.FD())
	foreign.Priority, foreign.Handle = 7, 1
	if err := h.FilterAdd(foreign); err != nil {
		t.Fatalf("add foreign filter: %v", err)
	}

	first, err := New(Options{Mode: ModeClsact, NetnsPath: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Attach(ifindex, progs); err != nil {
		t.Fatal(err)
	}
	// A restarted agent (the first one never detached) attaches again.
	restarted := loadPrograms(t) // a restarted agent loads its own copy
	second, _ := New(Options{Mode: ModeClsact, NetnsPath: path})
	if err := second.Attach(ifindex, restarted); err != nil {
		t.Fatal(err)
	}
	if err := second.Attach(ifindex, restarted); err != nil {
		t.Fatal(err)
	}
	if in, eg, foreign := ourFilters(t, h, ifindex); in != 1 || eg != 1 || foreign != 1 {
		t.Fatalf("after two attaches: %d ingress, %d egress sextant filters and %d others; want 1, 1, 1", in, eg, foreign)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if in, eg, foreign := ourFilters(t, h, ifindex); in != 0 || eg != 0 || foreign != 1 {
		t.Fatalf("after close: %d ingress, %d egress sextant filters and %d others; want 0, 0, 1", in, eg, foreign)
	}
}

func TestTCXAttachDetach(t *testing.T) {
	path, ifindex := testNetns(t)
	progs := loadPrograms(t)

	// Someone else's tcx program, which must survive.
	a, err := New(Options{NetnsPath: path})
	if err != nil {
		t.Fatal(err)
	}
	// tcx refuses the same program twice on a hook, so the other one is a
	// separately loaded copy, as a restarted agent's would be.
	other, _ := New(Options{Mode: ModeTCX, NetnsPath: path})
	if err := other.Attach(ifindex, loadPrograms(t)); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			t.Skip("skipping: the kernel has no tcx")
		}
		t.Fatal(err)
	}
	defer other.Close()

	if err := a.Attach(ifindex, progs); err != nil {
		t.Fatal(err)
	}
	if err := a.Attach(ifindex, progs); err != nil {
		t.Fatal(err)
	}
	if a.Mode() != string(ModeTCX) {
		t.Fatalf("mode %q, want tcx on this kernel", a.Mode())
	}
	count := func() (n int) {
		var res *link.QueryResult
		err := (&attacher{opts: Options{NetnsPath: path}}).inNetns(func() (err error) {
			res, err = link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: ebpf.AttachTCXIngress})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Programs)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d programs on tcx ingress, want 2 (ours once, and the other one)", n)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d programs on tcx ingress after close, want the other one only", n)
	}
}

func TestDetachAfterInterfaceVanished(t *testing.T) {
	for _, mode := range []Mode{ModeTCX, ModeClsact} {
		t.Run(string(mode), func(t *testing.T) {
			path, ifindex := testNetns(t)
			a, err := New(Options{Mode: mode, NetnsPath: path})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Attach(ifindex, loadPrograms(t)); err != nil {
				t.Fatal(err)
			}
			netnstest.Run(t, "ip", "-n", strings.TrimPrefix(path, "/var/run/netns/"), "link", "del", "m0")
			if err := a.Detach(ifindex); err != nil {
				t.Fatalf("detach from a deleted interface: %v", err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestClsactRemovesOnlyTheQdiscItAdded(t *testing.T) {
	path, ifindex := testNetns(t)
	h := netnstest.Handle(t, path)
	hasClsact := func() bool {
		l, err := h.LinkByIndex(ifindex)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := h.QdiscList(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Type() == "clsact" {
				return true
			}
		}
		return false
	}
	a, _ := New(Options{Mode: ModeClsact, NetnsPath: path})
	if err := a.Attach(ifindex, loadPrograms(t)); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if hasClsact() {
		t.Fatal("the clsact qdisc sextant added outlived sextant's filters")
	}

	// A clsact that was there before sextant stays.
	netnstest.Run(t, "ip", "netns", "exec", strings.TrimPrefix(path, "/var/run/netns/"), "tc", "qdisc", "add", "dev", "m0", "clsact")
	b, _ := New(Options{Mode: ModeClsact, NetnsPath: path})
	if err := b.Attach(ifindex, loadPrograms(t)); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !hasClsact() {
		t.Fatal("sextant removed a clsact qdisc it did not add")
	}
}

// TestClsactVerifyAndReattach: Verify notices a filter or the qdisc removed behind the
// attacher's back, Reattach restores it, and the ownership rule holds throughout: the
// qdisc is removed at the end only if the attacher added the one that is there.
func TestClsactVerifyAndReattach(t *testing.T) {
	path, ifindex := testNetns(t)
	ns := strings.TrimPrefix(path, "/var/run/netns/")
	h := netnstest.Handle(t, path)
	hasClsact := func() bool {
		l, err := h.LinkByIndex(ifindex)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := h.QdiscList(l)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(qs, func(q netlink.Qdisc) bool { return q.Type() == "clsact" })
	}
	progs := loadPrograms(t)
	a, _ := New(Options{Mode: ModeClsact, NetnsPath: path})
	if err := a.Attach(ifindex, progs); err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(ifindex); err != nil {
		t.Fatalf("verify right after attaching: %v", err)
	}

	// Our egress filter deleted: the meter attaches it again (and, unable to tell the
	// qdisc is still the one it added, leaves it to others from then on).
	if err := h.FilterDel(filterFor(MeterFilter, ifindex, netlink.HANDLE_MIN_EGRESS, MeterFilter.NamePrefix+"egress", 0)); err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(ifindex); !errors.Is(err, ErrNotAttached) || !strings.Contains(err.Error(), "egress filter was deleted") {
		t.Fatalf("verify without the egress filter: %v, want ErrNotAttached naming the egress filter", err)
	}
	if err := a.Reattach(ifindex, progs); err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(ifindex); err != nil {
		t.Fatalf("verify after reattaching: %v", err)
	}
	if in, eg, foreign := ourFilters(t, h, ifindex); in != 1 || eg != 1 || foreign != 0 {
		t.Fatalf("after reattaching: %d ingress, %d egress sextant filters and %d others; want 1, 1, 0", in, eg, foreign)
	}

	// The qdisc deleted, and another tool adds its own before the meter attaches again:
	// that one is not the meter's to remove.
	netnstest.Run(t, "ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "m0", "clsact")
	if err := a.Verify(ifindex); !errors.Is(err, ErrNotAttached) || !strings.Contains(err.Error(), "clsact qdisc was deleted") {
		t.Fatalf("verify without the qdisc: %v, want ErrNotAttached naming the qdisc", err)
	}
	netnstest.Run(t, "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "m0", "clsact")
	if err := a.Reattach(ifindex, progs); err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(ifindex); err != nil {
		t.Fatalf("verify after reattaching: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !hasClsact() {
		t.Fatal("sextant removed the clsact qdisc another tool added after sextant's was deleted")
	}

	// The qdisc deleted and added again by another tool between two checks: the meter
	// sees only its filters gone, and the qdisc is still not its to remove.
	netnstest.Run(t, "ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "m0", "clsact")
	c, _ := New(Options{Mode: ModeClsact, NetnsPath: path})
	if err := c.Attach(ifindex, progs); err != nil {
		t.Fatal(err)
	}
	netnstest.Run(t, "ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "m0", "clsact")
	netnstest.Run(t, "ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "m0", "clsact")
	if err := c.Verify(ifindex); !errors.Is(err, ErrNotAttached) || !strings.Contains(err.Error(), "filter was deleted") {
		t.Fatalf("verify with another clsact qdisc: %v, want ErrNotAttached naming a filter", err)
	}
	if err := c.Reattach(ifindex, progs); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !hasClsact() {
		t.Fatal("sextant removed a clsact qdisc another tool added in place of sextant's")
	}

	// The qdisc deleted, and the meter adds it again: that one is the meter's.
	netnstest.Run(t, "ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "m0", "clsact")
	b, _ := New(Options{Mode: ModeClsact, NetnsPath: path})
	if err := b.Attach(ifindex, progs); err != nil {
		t.Fatal(err)
	}
	netnstest.Run(t, "ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "m0", "clsact")
	if err := b.Verify(ifindex); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("verify without the qdisc: %v, want ErrNotAttached", err)
	}
	if err := b.Reattach(ifindex, progs); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if hasClsact() {
		t.Fatal("the clsact qdisc sextant added again outlived sextant's filters")
	}
}

// TestTCXVerifyAndReattach: Verify notices a tcx link detached from outside (bpftool
// link detach, say), and Reattach restores it without stacking a second copy.
func TestTCXVerifyAndReattach(t *testing.T) {
	path, ifindex := testNetns(t)
	progs := loadPrograms(t)
	a, _ := New(Options{Mode: ModeTCX, NetnsPath: path})
	if err := a.Attach(ifindex, progs); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			t.Skip("skipping: the kernel has no tcx")
		}
		t.Fatal(err)
	}
	defer a.Close()
	in := &attacher{opts: Options{NetnsPath: path}}
	query := func(hook ebpf.AttachType) []link.AttachedProgram {
		var res *link.QueryResult
		if err := in.inNetns(func() (err error) {
			res, err = link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: hook})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return res.Programs
	}
	if err := a.Verify(ifindex); err != nil {
		t.Fatalf("verify right after attaching: %v", err)
	}
	for _, p := range query(ebpf.AttachTCXEgress) {
		id, _ := p.LinkID()
		l, err := link.NewFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Detach(); err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	if err := a.Verify(ifindex); !errors.Is(err, ErrNotAttached) || !strings.Contains(err.Error(), "TCXEgress") {
		t.Fatalf("verify after the egress link was detached: %v, want ErrNotAttached naming egress", err)
	}
	if err := a.Reattach(ifindex, progs); err != nil {
		t.Fatal(err)
	}
	if err := a.Verify(ifindex); err != nil {
		t.Fatalf("verify after reattaching: %v", err)
	}
	for _, hook := range tcxHooks {
		if n := len(query(hook)); n != 1 {
			t.Errorf("%d programs on %s after reattaching, want the meter's once", n, hook)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, hook := range tcxHooks {
		if n := len(query(hook)); n != 0 {
			t.Errorf("%d programs on %s after close, want none", n, hook)
		}
	}
}

// Two attachers with their own filter identities (the meter's, the shaper's classifier)
// share one clsact qdisc: neither replaces, verifies or removes the other's filters.
func TestTwoIdentitiesShareClsact(t *testing.T) {
	path, ifindex := testNetns(t)
	progs := loadPrograms(t)
	h := netnstest.Handle(t, path)
	classifier := Filter{Priority: 2, Handle: 0x5e47, NamePrefix: "sextant_classify_", What: "the classifier"}
	meter, err := New(Options{Mode: ModeClsact, NetnsPath: path})
	if err != nil {
		t.Fatal(err)
	}
	cls, err := New(Options{Mode: ModeClsact, NetnsPath: path, Filter: classifier})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []Attacher{meter, cls} {
		if err := a.Attach(ifindex, progs); err != nil {
			t.Fatal(err)
		}
	}
	if in, eg, foreign := ourFilters(t, h, ifindex); in != 2 || eg != 2 || foreign != 0 {
		t.Fatalf("filters: %d ingress, %d egress, %d foreign; want 2, 2, 0", in, eg, foreign)
	}
	for _, a := range []Attacher{meter, cls} {
		if err := a.Verify(ifindex); err != nil {
			t.Errorf("verify: %v", err)
		}
	}
	// The meter goes first, though it added the qdisc: the classifier's filters stay.
	if err := meter.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cls.Verify(ifindex); err != nil {
		t.Fatalf("the classifier after the meter detached: %v", err)
	}
	if err := meter.Verify(ifindex); !errors.Is(err, ErrNotAttached) {
		t.Errorf("the meter after it detached: %v, want ErrNotAttached", err)
	}
	if err := cls.Close(); err != nil {
		t.Fatal(err)
	}
	if in, eg, foreign := ourFilters(t, h, ifindex); in+eg+foreign != 0 {
		t.Errorf("filters left: %d ingress, %d egress, %d foreign", in, eg, foreign)
	}
}
