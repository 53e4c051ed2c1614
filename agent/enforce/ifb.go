package enforce

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"sextant.io/sextant/agent/bandwidth/tc"
)

// Ingress is shaped on an IFB: the interface's received packets are redirected to the
// IFB's egress, where an HTB qdisc queues them like any sent packet, and the IFB hands
// them back to the stack as received by the interface.
const (
	// ifbPrefix names the agent's IFBs: sxifb<ifindex of the interface>.
	ifbPrefix = "sxifb"
	// ifbQueueLen is the IFB's txqueuelen, which sizes its HTB classes' FIFOs: an IFB's
	// own 32 packets would drop received TCP bursts long before HTB shapes them.
	ifbQueueLen = 1000
	// redirectPriority puts the redirect after other tc ingress filters (a CNI's),
	// which then see every packet before the IFB takes it, and after the classifier.
	redirectPriority = 0xfff0
)

// ClassifierFilter is the identity of the classifier's clsact filters: right after the
// meter, before the redirect.
var ClassifierFilter = tc.Filter{Priority: 2, Handle: 0x5e47, NamePrefix: "sextant_classify_", What: "the classifier"}

// IFBName is the name of the IFB that shapes the ingress of the interface with ifindex.
func IFBName(ifindex int) string { return ifbPrefix + strconv.Itoa(ifindex) }

// ifbOf returns the ifindex of the interface an IFB of the agent's shapes, and false for
// any other link.
func ifbOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, ifbPrefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i > 0
}

// ensureIFB makes the interface's IFB, up, and returns its ifindex.
func ensureIFB(h *netlink.Handle, ifindex int, ifname string) (int, error) {
	name := IFBName(ifindex)
	l, err := h.LinkByName(name)
	var nf netlink.LinkNotFoundError
	switch {
	case errors.As(err, &nf):
		attrs := netlink.NewLinkAttrs()
		attrs.Name = name
		attrs.TxQLen = ifbQueueLen
		if err := h.LinkAdd(&netlink.Ifb{LinkAttrs: attrs}); err != nil && !errors.Is(err, unix.EEXIST) {
			return 0, fmt.Errorf("make IFB %s for the ingress of %s: %w", name, ifname, err)
		}
		if l, err = h.LinkByName(name); err != nil {
			return 0, fmt.Errorf("find IFB %s: %w", name, err)
		}
		// For people reading `ip link`.
		_ = h.LinkSetAlias(l, "sextant: ingress of "+ifname)
	case err != nil:
		return 0, fmt.Errorf("find IFB %s: %w", name, err)
	case l.Type() != "ifb":
		return 0, fmt.Errorf("link %s is a %s, not the agent's IFB: rename it", name, l.Type())
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := h.LinkSetUp(l); err != nil {
			return 0, fmt.Errorf("set IFB %s up: %w", name, err)
		}
	}
	return l.Attrs().Index, nil
}

// redirectFilter is the u32 filter that sends every packet the interface receives to
// the IFB.
func redirectFilter(ifindex, ifb int) *netlink.U32 {
	return &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifindex,
			Parent:    netlink.HANDLE_MIN_INGRESS,
			Priority:  redirectPriority,
			Protocol:  unix.ETH_P_ALL,
		},
		// Match everything: one key of mask 0.
		Sel:     &netlink.TcU32Sel{Flags: nl.TC_U32_TERMINAL, Nkeys: 1, Keys: []netlink.TcU32Key{{}}},
		Actions: []netlink.Action{netlink.NewMirredAction(ifb)},
	}
}

// redirectTo returns the IFB the interface's ingress redirect sends to, 0 if it has none;
// an error if a foreign filter holds the redirect's slot.
func redirectTo(h *netlink.Handle, ifindex int) (int, error) {
	filters, err := h.FilterList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: ifindex}}, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return 0, nil // no clsact qdisc
		}
		return 0, fmt.Errorf("list the ingress filters of ifindex %d: %w", ifindex, err)
	}
	for _, f := range filters {
		if f.Attrs().Priority != redirectPriority {
			continue
		}
		u, ok := f.(*netlink.U32)
		if !ok || len(u.Actions) != 1 {
			return 0, fmt.Errorf("ifindex %d has a foreign %s filter at ingress priority %#x: not replacing it", ifindex, f.Type(), redirectPriority)
		}
		m, ok := u.Actions[0].(*netlink.MirredAction)
		if !ok {
			return 0, fmt.Errorf("ifindex %d has a foreign u32 filter at ingress priority %#x: not replacing it", ifindex, redirectPriority)
		}
		return m.Ifindex, nil
	}
	return 0, nil
}

// clsactQdisc is the interface's clsact qdisc, which holds the classifier's filters and
// the ingress redirect.
func clsactQdisc(ifindex int) *netlink.GenericQdisc {
	return &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
}

// ensureClsact adds a clsact qdisc to the interface if it has none; it reports whether
// it added one.
func ensureClsact(h *netlink.Handle, ifindex int) (bool, error) {
	switch err := h.QdiscAdd(clsactQdisc(ifindex)); {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EEXIST):
		return false, nil
	default:
		return false, fmt.Errorf("add a clsact qdisc to ifindex %d: %w", ifindex, err)
	}
}

// removeClsactIfEmpty deletes the interface's clsact qdisc when no filter is left on it.
func removeClsactIfEmpty(h *netlink.Handle, ifindex int) error {
	lnk := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: ifindex}}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		if fs, err := h.FilterList(lnk, parent); err != nil || len(fs) > 0 {
			return nil // in use by someone else (or unknown): leave it
		}
	}
	if err := h.QdiscDel(clsactQdisc(ifindex)); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("delete the clsact qdisc the agent added to ifindex %d: %w", ifindex, err)
	}
	return nil
}

// ensureRedirect sends the interface's received packets to the IFB; the interface has
// a clsact qdisc.
func ensureRedirect(h *netlink.Handle, ifindex, ifb int) error {
	to, err := redirectTo(h, ifindex)
	if err != nil || to == ifb {
		return err
	}
	if err := h.FilterReplace(redirectFilter(ifindex, ifb)); err != nil {
		return fmt.Errorf("redirect the ingress of ifindex %d to its IFB: %w", ifindex, err)
	}
	return nil
}

// removeRedirect deletes the redirect.
func removeRedirect(h *netlink.Handle, ifindex int) error {
	to, err := redirectTo(h, ifindex)
	if err != nil || to == 0 {
		return err
	}
	if err := h.FilterDel(redirectFilter(ifindex, to)); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete the ingress redirect of ifindex %d: %w", ifindex, err)
	}
	return nil
}

// deleteIFB deletes the IFB of the interface with ifindex, which takes its qdisc along.
func deleteIFB(h *netlink.Handle, ifindex int) error {
	l, err := h.LinkByName(IFBName(ifindex))
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("find IFB %s: %w", IFBName(ifindex), err)
	}
	if err := h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete IFB %s: %w", IFBName(ifindex), err)
	}
	return nil
}
