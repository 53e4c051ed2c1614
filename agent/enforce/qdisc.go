package enforce

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Major is the major number of every shaping qdisc the agent makes ("5e47", as the
// meter's filters), so that a restarted agent finds its own.
const Major uint16 = 0x5e47

// quantum is every class's DRR quantum, in bytes: equal quanta share what the classes
// borrow beyond their rates equally, and above a GSO packet's size each class sends a
// whole one per round.
const quantum = 65536

func classID(minor uint16) uint32 { return netlink.MakeHandle(Major, minor) }

// htb is one of the agent's HTB qdiscs: the root of an interface (egress) or of its
// IFB (ingress).
type htb struct {
	h       *netlink.Handle
	ifindex int
}

// ensureRoot makes the interface's root an HTB qdisc of the agent's, unless it is
// already; it reports whether it made it.
func (q htb) ensureRoot() (bool, error) {
	qdiscs, err := q.h.QdiscList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: q.ifindex}})
	if err != nil {
		return false, fmt.Errorf("list the qdiscs of ifindex %d: %w", q.ifindex, err)
	}
	if slices.ContainsFunc(qdiscs, q.isOurRoot) {
		return false, nil
	}
	root := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: q.ifindex, Handle: netlink.MakeHandle(Major, 0), Parent: netlink.HANDLE_ROOT})
	root.Defcls = uint32(DefaultMinor)
	// Replace, not delete and add: the interface is never without a qdisc. Until the
	// default class exists HTB sends what it gets unshaped, so no packet waits on it.
	if err := q.h.QdiscReplace(root); err != nil {
		return false, fmt.Errorf("make the HTB root of ifindex %d: %w", q.ifindex, err)
	}
	return true, nil
}

func (q htb) isOurRoot(qd netlink.Qdisc) bool {
	a := qd.Attrs()
	return a.Parent == netlink.HANDLE_ROOT && a.Handle == netlink.MakeHandle(Major, 0) && qd.Type() == "htb"
}

// hasOurRoot reports whether the interface's root is still the agent's HTB.
func (q htb) hasOurRoot() (bool, error) {
	qdiscs, err := q.h.QdiscList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: q.ifindex}})
	if err != nil {
		return false, fmt.Errorf("list the qdiscs of ifindex %d: %w", q.ifindex, err)
	}
	return slices.ContainsFunc(qdiscs, q.isOurRoot), nil
}

// classes returns the HTB's classes by minor.
func (q htb) classes() (map[uint16]*netlink.HtbClass, error) {
	list, err := q.h.ClassList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: q.ifindex}}, netlink.MakeHandle(Major, 0))
	if err != nil {
		return nil, fmt.Errorf("list the classes of ifindex %d: %w", q.ifindex, err)
	}
	out := map[uint16]*netlink.HtbClass{}
	for _, c := range list {
		hc, ok := c.(*netlink.HtbClass)
		if !ok {
			continue
		}
		major, minor := netlink.MajorMinor(hc.Handle)
		if major == Major {
			out[minor] = hc
		}
	}
	return out, nil
}

// newClass builds the class with rate and ceil in bits/s under parent.
func (q htb) newClass(parent uint16, c Class) *netlink.HtbClass {
	parentHandle := netlink.MakeHandle(Major, 0)
	if parent != 0 {
		parentHandle = classID(parent)
	}
	return netlink.NewHtbClass(netlink.ClassAttrs{LinkIndex: q.ifindex, Parent: parentHandle, Handle: classID(c.Minor)},
		netlink.HtbClassAttrs{Rate: c.Rate, Ceil: c.Ceil, Quantum: quantum, Buffer: burst(c.Rate), Cbuffer: burst(c.Ceil)})
}

// burst is the bytes a class may send at once above its rate: burstTime's worth, and at
// least a few GSO packets. tc's default (one MTU above rate/HZ) would hold a class that
// sends 64 KiB GSO packets well below its rate: HTB then waits out each packet's tokens
// on its timer.
func burst(bits uint64) uint32 {
	b := bits / 8 * uint64(burstTime) / uint64(time.Second)
	return uint32(min(max(b, minBurst), math.MaxUint32))
}

const (
	burstTime = 5 * time.Millisecond
	minBurst  = 3 * 65536
)

// sync makes the HTB's classes those of plan: the root class at the shaped rate, the
// default class, and each pod's. Classes whose rates did not change are not touched,
// and classes of pods no longer in the plan are deleted.
func (q htb) sync(plan QdiscPlan) error {
	have, err := q.classes()
	if err != nil {
		return err
	}
	want := map[uint16]*netlink.HtbClass{
		RootMinor:    q.newClass(0, Class{Minor: RootMinor, Rate: plan.Rate, Ceil: plan.Rate}),
		DefaultMinor: q.newClass(RootMinor, plan.Default),
	}
	for _, c := range plan.Pods {
		want[c.Minor] = q.newClass(RootMinor, c)
	}
	// Shrinking classes first, growing ones after, so the children's rates stay within
	// the root's as far as the order allows; the root before its children, which need it.
	order := []uint16{RootMinor}
	for minor := range want {
		if minor != RootMinor {
			order = append(order, minor)
		}
	}
	slices.SortFunc(order[1:], func(a, b uint16) int {
		return int(grows(have[a], want[a])) - int(grows(have[b], want[b]))
	})
	for minor, c := range have {
		if _, ok := want[minor]; !ok && minor != RootMinor {
			if err := q.h.ClassDel(c); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("delete class %x:%x of ifindex %d: %w", Major, minor, q.ifindex, err)
			}
		}
	}
	for _, minor := range order {
		c := want[minor]
		if h := have[minor]; h != nil && h.Rate == c.Rate && h.Ceil == c.Ceil && h.Quantum == c.Quantum && h.Parent == c.Parent &&
			h.Buffer == c.Buffer && h.Cbuffer == c.Cbuffer {
			continue
		}
		if err := q.h.ClassReplace(c); err != nil {
			return fmt.Errorf("set class %x:%x of ifindex %d (rate %d bit/s, ceil %d bit/s): %w", Major, minor, q.ifindex, c.Rate*8, c.Ceil*8, err)
		}
	}
	return nil
}

// grows orders a class change: -1 when the class shrinks or stays, 1 when it is new or grows.
func grows(have, want *netlink.HtbClass) int8 {
	if have != nil && want.Rate <= have.Rate {
		return -1
	}
	return 1
}
