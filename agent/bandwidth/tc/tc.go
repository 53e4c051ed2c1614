// Package tc hangs a pair of programs (the meter's, the shaper's classifier) on
// network interfaces at tc ingress and egress: through tcx links where the kernel
// has them (6.6+), through a clsact qdisc and direct-action bpf filters otherwise.
//
// Ownership rules, the same in both modes: the attacher only ever touches what
// it attached itself, never removes other programs or filters, removes a
// clsact qdisc only when it added it and nothing else uses it, and a restarted
// agent cannot stack a second copy of its programs:
//   - tcx links are held by the process's file descriptors and are not pinned,
//     so the kernel detaches them whenever the process ends (even on SIGKILL or
//     OOM); there is nothing to find again and bpffs need not be mounted.
//   - clsact filters outlive the process, so they sit at a fixed priority and
//     handle and carry a fixed name: attaching replaces an earlier copy in
//     place, and detaching deletes exactly that filter.
//
// Other software can still remove what the attacher attached (delete the clsact
// qdisc, detach a tcx link): Verify notices, and Reattach puts the programs back under
// the same rules.
package tc

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Attacher attaches a pair of programs to each interface, by ifindex.
type Attacher interface {
	// Attach hangs the programs on ingress and egress of the interface.
	// Attaching an interface that is already attached does nothing.
	Attach(ifindex int, progs Programs) error
	// Detach removes this attacher's programs from the interface; an
	// interface that is gone is not an error.
	Detach(ifindex int) error
	// Verify checks that the programs Attach hung on the interface are still on both
	// hooks: another tool may have removed them (a CNI reinstall deleting the clsact
	// qdisc, a detached tcx link), and then they count nothing. Its error wraps
	// ErrNotAttached when they are gone, and says which; any other error means it could
	// not tell.
	Verify(ifindex int) error
	// Reattach hangs the programs on the interface again after Verify found them
	// removed, replacing what is left of the earlier attachment.
	Reattach(ifindex int, progs Programs) error
	// Close detaches from every interface.
	Close() error
	// Mode says how programs are attached: "tcx" or "clsact" (empty until
	// the first Attach decided it).
	Mode() string
}

// Programs is what gets attached to an interface.
type Programs struct {
	Ingress *ebpf.Program
	Egress  *ebpf.Program
}

// Mode selects the attach mechanism.
type Mode string

const (
	ModeAuto   Mode = ""       // tcx where the kernel supports it, else clsact
	ModeTCX    Mode = "tcx"    // tcx links only
	ModeClsact Mode = "clsact" // clsact qdisc and bpf filters only
)

// Options configure an Attacher.
type Options struct {
	Mode Mode
	// NetnsPath is the network namespace the ifindexes live in, e.g.
	// /var/run/netns/NAME; empty means the caller's.
	NetnsPath string
	// Filter is the identity of the filters in clsact mode; zero is MeterFilter.
	Filter Filter
}

// ErrNotAttached is wrapped by Verify's error when the programs are no longer attached.
var ErrNotAttached = errors.New("the programs are no longer attached")

// Filter is the identity of an attacher's filters in clsact mode: each pair of
// programs sits at its own priority and handle, under a name that makes the filter
// recognisably sextant's.
type Filter struct {
	Priority   uint16
	Handle     uint32
	NamePrefix string
	// What names the programs in errors, e.g. "the meter".
	What string
}

// MeterFilter is the meter's identity. Priority 1 runs the meter before other
// filters, so it sees every frame even when a later filter ends the chain with a
// verdict.
var MeterFilter = Filter{Priority: 1, Handle: 0x5e47, NamePrefix: "sextant_", What: "the meter"}

// New returns an Attacher.
func New(opts Options) (Attacher, error) {
	if opts.Filter == (Filter{}) {
		opts.Filter = MeterFilter
	}
	a := &attacher{opts: opts, attached: map[int]*attachment{}}
	switch opts.Mode {
	case ModeAuto:
	case ModeTCX, ModeClsact:
		a.mode = opts.Mode
	default:
		return nil, fmt.Errorf("unknown attach mode %q (want %q, %q or empty for automatic)", opts.Mode, ModeTCX, ModeClsact)
	}
	return a, nil
}

type attachment struct {
	links  []link.Link // tcx
	clsact bool
	// progIDs are the ingress and egress programs' IDs, which Verify looks for on the
	// hooks; zero where the kernel does not tell.
	progIDs [2]ebpf.ProgramID
	// ownQdisc: this attacher added the clsact qdisc, so it may remove it
	// again once it holds no filters at all.
	ownQdisc bool
}

type attacher struct {
	opts     Options
	mu       sync.Mutex
	mode     Mode
	attached map[int]*attachment
}

func (a *attacher) Mode() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return string(a.mode)
}

func (a *attacher) Attach(ifindex int, progs Programs) error {
	if progs.Ingress == nil || progs.Egress == nil {
		return errors.New("both an ingress and an egress program are needed")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.attached[ifindex]; ok {
		return nil
	}
	return a.attach(ifindex, progs)
}

func (a *attacher) attach(ifindex int, progs Programs) error {
	ids := programIDs(progs)
	if a.mode == ModeAuto || a.mode == ModeTCX {
		var links []link.Link
		err := a.inNetns(func() (err error) {
			links, err = attachTCX(progs, ifindex)
			return err
		})
		if err == nil {
			a.mode = ModeTCX
			a.attached[ifindex] = &attachment{links: links, progIDs: ids}
			return nil
		}
		if a.mode == ModeTCX || !errors.Is(err, ebpf.ErrNotSupported) {
			return err
		}
		a.mode = ModeClsact
	}
	var added bool
	if err := a.withHandle(func(h *netlink.Handle) (err error) {
		added, err = attachClsact(h, a.opts.Filter, progs, ifindex)
		return err
	}); err != nil {
		return err
	}
	a.attached[ifindex] = &attachment{clsact: true, ownQdisc: added, progIDs: ids}
	return nil
}

// programIDs returns the programs' IDs, zero where the kernel does not give one (before
// 4.13): Verify then takes any sextant filter for ours.
func programIDs(progs Programs) (ids [2]ebpf.ProgramID) {
	for i, p := range []*ebpf.Program{progs.Ingress, progs.Egress} {
		if info, err := p.Info(); err == nil {
			ids[i], _ = info.ID()
		}
	}
	return ids
}

func (a *attacher) Verify(ifindex int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.attached[ifindex]
	if !ok {
		return fmt.Errorf("ifindex %d: %w", ifindex, ErrNotAttached)
	}
	if at.clsact {
		return a.withHandle(func(h *netlink.Handle) error { return verifyClsact(h, a.opts.Filter, ifindex, at) })
	}
	if len(at.links) == 0 {
		// An earlier Reattach closed them and failed to attach again.
		return fmt.Errorf("ifindex %d has no tcx links: %w", ifindex, ErrNotAttached)
	}
	return a.inNetns(func() error { return verifyTCX(a.opts.Filter, ifindex, at.progIDs) })
}

func (a *attacher) Reattach(ifindex int, progs Programs) error {
	if progs.Ingress == nil || progs.Egress == nil {
		return errors.New("both an ingress and an egress program are needed")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.attached[ifindex]
	if !ok {
		return a.attach(ifindex, progs)
	}
	at.progIDs = programIDs(progs)
	if at.clsact {
		// Replacing our filters is what attaching does anyway. The qdisc is ours if we
		// add it now (verifyClsact forgot the one we had added once our filters were
		// gone from it).
		var added bool
		err := a.withHandle(func(h *netlink.Handle) (err error) {
			added, err = attachClsact(h, a.opts.Filter, progs, ifindex)
			return err
		})
		at.ownQdisc = at.ownQdisc || added
		return err
	}
	// Close what is left first: a link still attached would hold its hook, and tcx
	// refuses the same program twice on one.
	for _, l := range at.links {
		if err := l.Close(); err != nil {
			return fmt.Errorf("close tcx link on ifindex %d: %w", ifindex, err)
		}
	}
	at.links = nil
	return a.inNetns(func() (err error) {
		at.links, err = attachTCX(progs, ifindex)
		return err
	})
}

func (a *attacher) Detach(ifindex int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.detach(ifindex)
}

func (a *attacher) detach(ifindex int) error {
	at, ok := a.attached[ifindex]
	if !ok {
		return nil
	}
	delete(a.attached, ifindex)
	var errs []error
	for _, l := range at.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close tcx link on ifindex %d: %w", ifindex, err))
		}
	}
	if at.clsact {
		errs = append(errs, a.withHandle(func(h *netlink.Handle) error { return detachClsact(h, a.opts.Filter, ifindex, at.ownQdisc) }))
	}
	return errors.Join(errs...)
}

func (a *attacher) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for ifindex := range a.attached {
		errs = append(errs, a.detach(ifindex))
	}
	return errors.Join(errs...)
}

// inNetns runs fn on a thread that is in the configured network namespace,
// because tcx resolves the ifindex in the namespace of the calling thread.
func (a *attacher) inNetns(fn func() error) error {
	if a.opts.NetnsPath == "" {
		return fn()
	}
	target, err := netns.GetFromPath(a.opts.NetnsPath)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", a.opts.NetnsPath, err)
	}
	defer target.Close()

	errc := make(chan error, 1)
	go func() {
		// The thread is left locked when it did not make it back to its
		// namespace, so that the runtime throws it away with the goroutine.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("open current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", a.opts.NetnsPath, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return from netns %s: %w", a.opts.NetnsPath, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func (a *attacher) withHandle(fn func(*netlink.Handle) error) error {
	ns := netns.None()
	if a.opts.NetnsPath != "" {
		var err error
		ns, err = netns.GetFromPath(a.opts.NetnsPath)
		if err != nil {
			return fmt.Errorf("open netns %s: %w", a.opts.NetnsPath, err)
		}
		defer ns.Close()
	}
	var h *netlink.Handle
	var err error
	if ns.IsOpen() {
		h, err = netlink.NewHandleAt(ns)
	} else {
		h, err = netlink.NewHandle()
	}
	if err != nil {
		return fmt.Errorf("open netlink: %w", err)
	}
	defer h.Close()
	return fn(h)
}

var tcxHooks = [2]ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress}

// verifyTCX checks that both programs are on their tcx hook; it must run in the
// interface's namespace.
func verifyTCX(id Filter, ifindex int, ids [2]ebpf.ProgramID) error {
	for i, hook := range tcxHooks {
		if ids[i] == 0 {
			continue // unknown: nothing to look for
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: hook})
		if err != nil {
			return fmt.Errorf("list tcx %s programs of ifindex %d: %w", hook, ifindex, err)
		}
		if !slices.ContainsFunc(res.Programs, func(p link.AttachedProgram) bool { return p.ID == ids[i] }) {
			return fmt.Errorf("ifindex %d: %s's %s link was detached: %w", ifindex, id.What, hook, ErrNotAttached)
		}
	}
	return nil
}

func attachTCX(progs Programs, ifindex int) ([]link.Link, error) {
	var links []link.Link
	for _, p := range []struct {
		prog   *ebpf.Program
		attach ebpf.AttachType
	}{
		{progs.Ingress, tcxHooks[0]},
		{progs.Egress, tcxHooks[1]},
	} {
		// At the head of the chain for the same reason as the clsact
		// priority: a program before the meter could end the chain.
		l, err := link.AttachTCX(link.TCXOptions{
			Interface: ifindex,
			Program:   p.prog,
			Attach:    p.attach,
			Anchor:    link.Head(),
		})
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			return nil, fmt.Errorf("attach tcx %s to ifindex %d: %w", p.attach, ifindex, err)
		}
		links = append(links, l)
	}
	return links, nil
}

func filterFor(id Filter, ifindex int, parent uint32, name string, fd int) *netlink.BpfFilter {
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifindex,
			Parent:    parent,
			Handle:    id.Handle,
			Priority:  id.Priority,
			Protocol:  unix.ETH_P_ALL,
		},
		Fd:           fd,
		Name:         name,
		DirectAction: true,
	}
}

// clsactParent is one of the clsact qdisc's two hooks.
type clsactParent struct {
	parent uint32
	hook   string
}

var clsactParents = []clsactParent{
	{netlink.HANDLE_MIN_INGRESS, "ingress"},
	{netlink.HANDLE_MIN_EGRESS, "egress"},
}

// name is the name of id's filter on the hook.
func (p clsactParent) name(id Filter) string { return id.NamePrefix + p.hook }

// attachClsact reports whether it added the clsact qdisc.
func attachClsact(h *netlink.Handle, id Filter, progs Programs, ifindex int) (added bool, err error) {
	lnk, err := h.LinkByIndex(ifindex)
	if err != nil {
		return false, fmt.Errorf("find ifindex %d: %w", ifindex, err)
	}
	// Add, never replace: replacing an existing clsact would flush the
	// filters other software attached to it.
	switch err := h.QdiscAdd(clsactQdisc(ifindex)); {
	case err == nil:
		added = true
	case !errors.Is(err, unix.EEXIST):
		return false, fmt.Errorf("add clsact qdisc to %s: %w", lnk.Attrs().Name, err)
	}
	for i, p := range []*ebpf.Program{progs.Ingress, progs.Egress} {
		parent := clsactParents[i]
		if err := checkSlotIsOurs(h, id, lnk, parent.parent); err != nil {
			return added, err
		}
		if err := h.FilterReplace(filterFor(id, ifindex, parent.parent, parent.name(id), p.FD())); err != nil {
			return added, fmt.Errorf("attach %s filter to %s: %w", parent.name(id), lnk.Attrs().Name, err)
		}
	}
	return added, nil
}

// verifyClsact checks that our filters, running our programs, are on both clsact hooks.
// When the clsact qdisc itself is gone, the attachment stops owning a qdisc: one found
// there later was added by someone else, and is theirs to remove.
func verifyClsact(h *netlink.Handle, id Filter, ifindex int, at *attachment) error {
	lnk, err := h.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("find ifindex %d: %w", ifindex, err)
	}
	for i, parent := range clsactParents {
		f, err := ourFilter(h, id, lnk, parent.parent)
		if err != nil {
			return err
		}
		if bf, ok := f.(*netlink.BpfFilter); ok && strings.HasPrefix(bf.Name, id.NamePrefix) && (at.progIDs[i] == 0 || bf.Id == int(at.progIDs[i])) {
			continue
		}
		// Our filter is gone, and with it what told the qdisc was ours: another tool may
		// have deleted it and added its own between two checks. Not knowing, the
		// attacher leaves whatever clsact qdisc is there to others; an empty one it
		// added may stay behind, which costs nothing.
		at.ownQdisc = false
		qdiscs, err := h.QdiscList(lnk)
		if err != nil {
			return fmt.Errorf("list qdiscs of %s: %w", lnk.Attrs().Name, err)
		}
		if !slices.ContainsFunc(qdiscs, func(q netlink.Qdisc) bool { return q.Type() == "clsact" }) {
			return fmt.Errorf("%s: the clsact qdisc was deleted: %w", lnk.Attrs().Name, ErrNotAttached)
		}
		if f != nil {
			return fmt.Errorf("%s: another filter replaced %s's %s filter: %w", lnk.Attrs().Name, id.What, parent.name(id), ErrNotAttached)
		}
		return fmt.Errorf("%s: %s's %s filter was deleted: %w", lnk.Attrs().Name, id.What, parent.name(id), ErrNotAttached)
	}
	return nil
}

func clsactQdisc(ifindex int) *netlink.GenericQdisc {
	return &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
}

// checkSlotIsOurs refuses to overwrite a filter that sits at our priority and
// handle but was not put there by sextant.
func checkSlotIsOurs(h *netlink.Handle, id Filter, lnk netlink.Link, parent uint32) error {
	f, err := ourFilter(h, id, lnk, parent)
	if err != nil || f == nil {
		return err
	}
	if bf, ok := f.(*netlink.BpfFilter); !ok || !strings.HasPrefix(bf.Name, id.NamePrefix) {
		return fmt.Errorf("%s has a foreign tc filter at priority %d handle %#x: not replacing it", lnk.Attrs().Name, id.Priority, id.Handle)
	}
	return nil
}

func ourFilter(h *netlink.Handle, id Filter, lnk netlink.Link, parent uint32) (netlink.Filter, error) {
	filters, err := h.FilterList(lnk, parent)
	if err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil, nil // no clsact qdisc
		}
		return nil, fmt.Errorf("list tc filters of %s: %w", lnk.Attrs().Name, err)
	}
	for _, f := range filters {
		a := f.Attrs()
		if a.Handle == id.Handle && a.Priority == id.Priority {
			return f, nil
		}
	}
	return nil, nil
}

// detachClsact deletes our filters, and the clsact qdisc too when we added it
// and no filter of anyone else's has appeared on it since.
func detachClsact(h *netlink.Handle, id Filter, ifindex int, ownQdisc bool) error {
	lnk, err := h.LinkByIndex(ifindex)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return nil // the interface and its filters are gone
		}
		return fmt.Errorf("find ifindex %d: %w", ifindex, err)
	}
	var errs []error
	for _, parent := range clsactParents {
		f, err := ourFilter(h, id, lnk, parent.parent)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		bf, ok := f.(*netlink.BpfFilter)
		if !ok || !strings.HasPrefix(bf.Name, id.NamePrefix) {
			continue
		}
		if err := h.FilterDel(filterFor(id, ifindex, parent.parent, parent.name(id), 0)); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete %s filter from %s: %w", parent.name(id), lnk.Attrs().Name, err))
		}
	}
	if !ownQdisc || len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, parent := range clsactParents {
		if fs, err := h.FilterList(lnk, parent.parent); err != nil || len(fs) > 0 {
			return nil // in use by someone else (or unknown): leave it
		}
	}
	if err := h.QdiscDel(clsactQdisc(ifindex)); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("delete the clsact qdisc sextant added to %s: %w", lnk.Attrs().Name, err)
	}
	return nil
}

// Remove deletes the filters of opts' identity from the interface's clsact hooks,
// whoever attached them: an agent undoes there what an earlier run of it attached.
// The clsact qdisc stays; an interface without one, or gone, is not an error.
func Remove(opts Options, ifindex int) error {
	if opts.Filter == (Filter{}) {
		opts.Filter = MeterFilter
	}
	a := &attacher{opts: opts}
	return a.withHandle(func(h *netlink.Handle) error { return detachClsact(h, opts.Filter, ifindex, false) })
}
