package enforce

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/cilium/ebpf/link"
	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/agent/bandwidth/tc"
	"sextant.io/sextant/bpf"
)

// Shaper makes and keeps the kernel side of enforcement in one network namespace: per
// shaped interface an HTB root for egress, an IFB with an HTB root for ingress and the
// redirect to it, and the classifier's filters; and the classifier's maps.
//
// What it makes outlives the agent: the qdiscs and filters stay in the kernel, and the
// filters keep the classifier's programs and maps alive. A restarted agent loads the
// classifier anew, fills its maps, and only then replaces the filters, so the pods keep
// their classes throughout; the state file tells it what each interface held before.
type Shaper struct {
	h          *netlink.Handle
	raw        rawNetlink
	netnsPath  string
	classifier *bpf.Classifier
	filters    tc.Attacher
	sockets    *sockLinks
	state      *State
	log        logr.Logger
}

// NewShaper opens netlink in the network namespace at netnsPath (empty: the agent's),
// loads the classifier, and reads the state in stateDir.
func NewShaper(netnsPath, stateDir string, log logr.Logger) (*Shaper, error) {
	state, err := LoadState(stateDir)
	if err != nil {
		return nil, err
	}
	ns := netns.None()
	if netnsPath != "" {
		if ns, err = netns.GetFromPath(netnsPath); err != nil {
			return nil, fmt.Errorf("open netns %s: %w", netnsPath, err)
		}
		defer ns.Close()
	}
	s := &Shaper{netnsPath: netnsPath, state: state, log: log}
	if s.h, err = netlink.NewHandleAt(ns); err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	sock, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		s.h.Close()
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	s.raw = rawNetlink{sockets: map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}}
	if s.classifier, err = bpf.NewClassifier(Major); err != nil {
		s.Close()
		return nil, err
	}
	s.sockets = &sockLinks{prog: s.classifier.SockCreate(), links: map[string]link.Link{}}
	// clsact filters, not tcx links: they outlast the agent, so a restart leaves every
	// pod classified.
	if s.filters, err = tc.New(tc.Options{Mode: tc.ModeClsact, NetnsPath: netnsPath, Filter: ClassifierFilter}); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the agent's handles. What it made in the kernel stays (see Unshape),
// except the socket-labelling program on host-network pods' cgroups.
func (s *Shaper) Close() error {
	if s.sockets != nil {
		s.sockets.close()
	}
	if s.classifier != nil {
		s.classifier.Close()
	}
	for _, sh := range s.raw.sockets {
		sh.Close()
	}
	if s.h != nil {
		s.h.Close()
	}
	return nil
}

// Shaped returns the interfaces the agent shapes, or shaped in an earlier run, sorted.
func (s *Shaper) Shaped() []string {
	names := make([]string, 0, len(s.state.Interfaces))
	for n := range s.state.Interfaces {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// State is the agent's record of what it shaped and the pods' minors.
func (s *Shaper) State() *State { return s.state }

// ErrInterfaceGone is wrapped by Shape's error when the interface no longer exists.
var ErrInterfaceGone = errors.New("no such interface")

func (s *Shaper) ifindex(name string) (int, error) {
	l, err := s.h.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return 0, fmt.Errorf("find interface %s: %w", name, ErrInterfaceGone)
	}
	if err != nil {
		return 0, fmt.Errorf("find interface %s: %w", name, err)
	}
	return l.Attrs().Index, nil
}

// Shape makes the interface shaped as plan says: on the first call for it, recording
// what its root held before.
func (s *Shaper) Shape(plan InterfacePlan) error {
	name := plan.Name
	ifindex, err := s.ifindex(name)
	if err != nil {
		return err
	}
	st := s.state.Interfaces[name]
	if st != nil && st.Ifindex != ifindex {
		// The interface was made again: its root is the kernel's default, and the IFB
		// named after the old ifindex shapes nothing.
		s.log.Info("a shaped interface was made again; shaping it anew", "interface", name, "ifindex", ifindex, "was", st.Ifindex)
		if err := deleteIFB(s.h, st.Ifindex); err != nil {
			return err
		}
		st = nil
	}
	egress := htb{h: s.h, ifindex: ifindex}
	if st == nil {
		st = &InterfaceState{Ifindex: ifindex}
		ours, err := egress.hasOurRoot()
		if err != nil {
			return err
		}
		if ours {
			// An earlier run shaped it and its record is lost: the default is the best
			// guess of what was there.
			s.log.Info("the interface has the agent's root qdisc but no record of what it replaced; it goes back to the kernel's default when unshaped", "interface", name)
		} else if st.Previous, err = s.raw.readPrevious(ifindex); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if st.AddedClsact, err = ensureClsact(s.h, ifindex); err != nil {
			return err
		}
		// Recorded before the root changes: what cannot be undone must not happen first.
		s.state.Interfaces[name] = st
		if err := s.state.Save(); err != nil {
			return err
		}
		s.log.Info("shaping an interface", "interface", name, "previousRoot", st.Previous.Describe())
	}
	if _, err := egress.ensureRoot(); err != nil {
		return err
	}
	if err := egress.sync(plan.Qdisc[Egress]); err != nil {
		return err
	}
	ifb, err := ensureIFB(s.h, ifindex, name)
	if err != nil {
		return err
	}
	ingress := htb{h: s.h, ifindex: ifb}
	if _, err := ingress.ensureRoot(); err != nil {
		return err
	}
	if err := ingress.sync(plan.Qdisc[Ingress]); err != nil {
		return err
	}
	if _, err := ensureClsact(s.h, ifindex); err != nil {
		return err
	}
	progs := tc.Programs{Ingress: s.classifier.Ingress(), Egress: s.classifier.Egress()}
	if err := s.filters.Verify(ifindex); err != nil {
		if !errors.Is(err, tc.ErrNotAttached) {
			return err
		}
		if err := s.filters.Reattach(ifindex, progs); err != nil {
			return err
		}
	}
	// Last: the IFB's classes and the classifier are in place before any packet goes
	// through the IFB.
	return ensureRedirect(s.h, ifindex, ifb)
}

// Unshape gives the interface back what it had before the agent shaped it: its root
// qdisc, no IFB, no redirect, no classifier filters, and no clsact qdisc the agent
// added. An interface gone, or made again since, only loses its record and its IFB.
func (s *Shaper) Unshape(name string) error {
	st := s.state.Interfaces[name]
	if st == nil {
		return nil
	}
	ifindex, err := s.ifindex(name)
	switch {
	case errors.Is(err, ErrInterfaceGone) || err == nil && ifindex != st.Ifindex:
		if err := deleteIFB(s.h, st.Ifindex); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		// The redirect first: packets must not go to an IFB being deleted.
		if err := removeRedirect(s.h, ifindex); err != nil {
			return err
		}
		if err := s.filters.Detach(ifindex); err != nil {
			return err
		}
		if err := tc.Remove(tc.Options{Mode: tc.ModeClsact, NetnsPath: s.netnsPath, Filter: ClassifierFilter}, ifindex); err != nil {
			return err
		}
		if err := deleteIFB(s.h, ifindex); err != nil {
			return err
		}
		if err := s.raw.restore(ifindex, st.Previous); err != nil {
			return err
		}
		if st.AddedClsact {
			if err := removeClsactIfEmpty(s.h, ifindex); err != nil {
				return err
			}
		}
		s.log.Info("stopped shaping an interface", "interface", name, "restoredRoot", st.Previous.Describe())
	}
	delete(s.state.Interfaces, name)
	return s.state.Save()
}

// Classify makes the classifier's maps hold exactly the classified pods' addresses and
// cgroups, each with its pod's class.
func (s *Shaper) Classify(pods []Pod, classified map[types.UID]uint16) error {
	wantAddr := map[netip.Addr]uint32{}
	wantCgroup := map[uint64]uint32{}
	wantSockets := map[string]bool{}
	// An address two pods hold (one ending, the other given its address again) is the
	// one bound later's.
	pods = slices.Clone(pods)
	slices.SortStableFunc(pods, func(a, b Pod) int { return a.Bound.Compare(b.Bound) })
	for _, p := range pods {
		minor, ok := classified[p.UID]
		for _, a := range p.Addresses {
			if ok {
				wantAddr[a.Unmap()] = classID(minor)
			} else {
				delete(wantAddr, a.Unmap())
			}
		}
		if p.Cgroup.ID != 0 && ok {
			wantCgroup[p.Cgroup.ID] = classID(minor)
			wantSockets[p.Cgroup.Path] = true
		}
	}
	haveAddr, err := s.classifier.Addresses()
	if err != nil {
		return err
	}
	errs := syncEntries(haveAddr, wantAddr, s.classifier.SetAddress, s.classifier.DeleteAddress)
	haveCgroup, err := s.classifier.Cgroups()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	errs = append(errs, syncEntries(haveCgroup, wantCgroup, s.classifier.SetCgroup, s.classifier.DeleteCgroup)...)
	// After the map: a socket labelled finds its pod's class there.
	errs = append(errs, s.sockets.sync(wantSockets))
	return errors.Join(errs...)
}

// syncEntries makes one of the classifier's maps, holding have, hold want.
func syncEntries[K comparable](have, want map[K]uint32, set func(K, uint32) error, del func(K) error) []error {
	var errs []error
	for k := range have {
		if _, ok := want[k]; !ok {
			errs = append(errs, del(k))
		}
	}
	for k, c := range want {
		if have[k] != c {
			errs = append(errs, set(k, c))
		}
	}
	return errs
}

// ClassStats is one class's counters as HTB keeps them.
type ClassStats struct {
	// Rate and Ceil are the class's, in bits/s.
	Rate, Ceil       uint64
	Bytes, Packets   uint64
	Drops, Overlimit uint32
	// Backlog is what waits in the class's queue, in bytes.
	Backlog uint32
}

// Stats returns the classes of the interface's two shaping qdiscs by minor, per
// direction.
func (s *Shaper) Stats(name string) ([2]map[uint16]ClassStats, error) {
	var out [2]map[uint16]ClassStats
	ifindex, err := s.ifindex(name)
	if err != nil {
		return out, err
	}
	ifb, err := s.ifindex(IFBName(ifindex))
	if err != nil {
		return out, err
	}
	for _, q := range []struct {
		d       Direction
		ifindex int
	}{{Egress, ifindex}, {Ingress, ifb}} {
		classes, err := htb{h: s.h, ifindex: q.ifindex}.classes()
		if err != nil {
			return out, err
		}
		m := make(map[uint16]ClassStats, len(classes))
		for minor, c := range classes {
			cs := ClassStats{Rate: c.Rate * 8, Ceil: c.Ceil * 8}
			if st := c.Statistics; st != nil {
				if st.Basic != nil {
					cs.Bytes, cs.Packets = st.Basic.Bytes, uint64(st.Basic.Packets)
				}
				if st.Queue != nil {
					cs.Drops, cs.Overlimit, cs.Backlog = st.Queue.Drops, st.Queue.Overlimits, st.Queue.Backlog
				}
			}
			m[minor] = cs
		}
		out[q.d] = m
	}
	return out, nil
}
