package enforce

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// QdiscConfig is one qdisc as the kernel reports it: what it takes to make it again.
// Options are the kernel's own TCA_OPTIONS bytes, which it accepts back as they are for
// the qdiscs it dumps them for.
type QdiscConfig struct {
	Kind    string `json:"kind"`
	Handle  uint32 `json:"handle"`
	Parent  uint32 `json:"parent"`
	Options []byte `json:"options,omitempty"`
	// Stab is the size table (tc ... stab), if the qdisc has one.
	Stab []byte `json:"stab,omitempty"`
}

// Previous is what an interface's root held before the agent shaped it.
type Previous struct {
	// Qdiscs are the root qdisc and those below it, root first; empty when the
	// root was the kernel's default (handle 0), which deleting the agent's root brings
	// back.
	Qdiscs []QdiscConfig `json:"qdiscs,omitempty"`
}

// Default reports whether the root was the kernel's default.
func (p Previous) Default() bool { return len(p.Qdiscs) == 0 }

// Describe says what the root was, for logs and events.
func (p Previous) Describe() string {
	if p.Default() {
		return "the kernel's default"
	}
	r := p.Qdiscs[0]
	return fmt.Sprintf("%s %x:", r.Kind, r.Handle>>16)
}

// rawNetlink is a route netlink socket in the network namespace the agent shapes, for
// the requests the typed netlink library cannot make: dumps that keep a qdisc's raw
// options, and qdiscs made from them again.
type rawNetlink struct {
	sockets map[int]*nl.SocketHandle
}

func (r rawNetlink) request(proto, flags int) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(proto, flags)
	req.Sockets = r.sockets
	return req
}

// dumpQdiscs returns every qdisc of the interface.
func (r rawNetlink) dumpQdiscs(ifindex int) ([]QdiscConfig, error) {
	req := r.request(unix.RTM_GETQDISC, unix.NLM_F_DUMP)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(ifindex)})
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWQDISC)
	if err != nil {
		return nil, fmt.Errorf("dump the qdiscs of ifindex %d: %w", ifindex, err)
	}
	var out []QdiscConfig
	for _, m := range msgs {
		if len(m) < nl.SizeofTcMsg {
			continue
		}
		msg := nl.DeserializeTcMsg(m)
		if int(msg.Ifindex) != ifindex {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofTcMsg:])
		if err != nil {
			return nil, fmt.Errorf("parse a qdisc of ifindex %d: %w", ifindex, err)
		}
		q := QdiscConfig{Handle: msg.Handle, Parent: msg.Parent}
		for _, a := range attrs {
			switch a.Attr.Type {
			case nl.TCA_KIND:
				q.Kind = string(trimNul(a.Value))
			case nl.TCA_OPTIONS:
				q.Options = slices.Clone(a.Value)
			case nl.TCA_STAB:
				q.Stab = slices.Clone(a.Value)
			}
		}
		out = append(out, q)
	}
	return out, nil
}

// putQdisc makes q on the interface, replacing what sits at its parent.
func (r rawNetlink) putQdisc(ifindex int, q QdiscConfig) error {
	req := r.request(unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(ifindex), Handle: q.Handle, Parent: q.Parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated(q.Kind)))
	if q.Options != nil {
		req.AddData(nl.NewRtAttr(nl.TCA_OPTIONS, q.Options))
	}
	if q.Stab != nil {
		req.AddData(nl.NewRtAttr(nl.TCA_STAB, q.Stab))
	}
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("make qdisc %s %x: on ifindex %d: %w", q.Kind, q.Handle>>16, ifindex, err)
	}
	return nil
}

// deleteRoot deletes the interface's root qdisc, which brings back the kernel's default.
func (r rawNetlink) deleteRoot(ifindex int) error {
	req := r.request(unix.RTM_DELQDISC, unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(ifindex), Parent: netlink.HANDLE_ROOT})
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("delete the root qdisc of ifindex %d: %w", ifindex, err)
	}
	return nil
}

// The parents of the qdiscs that are not under the root: ingress and clsact.
const ingressParent = 0xfffffff1

// ErrForeignShaping is wrapped by readPrevious's error when the root is another tool's
// classful shaping: replacing it would throw that shaping away.
var ErrForeignShaping = errors.New("the interface is shaped by someone else")

// classful are the root qdiscs whose classes are someone's shaping or prioritisation
// policy. mq and mqprio hold only per-queue classes, and the classless qdiscs (tbf,
// fq, fq_codel, ...) are kept and restored, with what is below them.
var classful = []string{"htb", "hfsc", "cbq", "drr", "qfq", "ets", "prio", "multiq", "taprio"}

// readPrevious returns what the interface's root holds now, to restore later: the root
// and every qdisc below it that is not the kernel's default (handle 0), parents before
// children. It refuses a classful root.
func (r rawNetlink) readPrevious(ifindex int) (Previous, error) {
	qdiscs, err := r.dumpQdiscs(ifindex)
	if err != nil {
		return Previous{}, err
	}
	var root *QdiscConfig
	var below []QdiscConfig
	for i := range qdiscs {
		q := qdiscs[i]
		switch {
		case q.Parent == ingressParent:
		case q.Parent == netlink.HANDLE_ROOT:
			root = &qdiscs[i]
		case q.Handle != 0:
			below = append(below, q)
		}
	}
	if root == nil || root.Handle == 0 {
		// The default (noqueue, pfifo_fast, or mq with default children): deleting
		// the agent's root brings it back.
		return Previous{}, nil
	}
	if slices.Contains(classful, root.Kind) {
		return Previous{}, fmt.Errorf("root qdisc %s %x: is another tool's classful shaping: %w", root.Kind, root.Handle>>16, ErrForeignShaping)
	}
	return Previous{Qdiscs: append([]QdiscConfig{*root}, parentsFirst(below, root.Handle)...)}, nil
}

// parentsFirst orders qdiscs so that each comes after the qdisc whose class is its
// parent, starting below the root's handle.
func parentsFirst(qdiscs []QdiscConfig, root uint32) []QdiscConfig {
	made := map[uint32]bool{root: true}
	var out []QdiscConfig
	for len(out) < len(qdiscs) {
		progress := false
		for _, q := range qdiscs {
			if made[q.Handle] || !made[q.Parent&0xffff0000] {
				continue
			}
			out = append(out, q)
			made[q.Handle] = true
			progress = true
		}
		if !progress {
			break // an orphan: the kernel's dump cannot have one, so nothing is lost
		}
	}
	return out
}

// restore makes the interface's root what p says it was.
func (r rawNetlink) restore(ifindex int, p Previous) error {
	if p.Default() {
		return r.deleteRoot(ifindex)
	}
	for _, q := range p.Qdiscs {
		if err := r.putQdisc(ifindex, q); err != nil {
			return fmt.Errorf("restore %s: %w", p.Describe(), err)
		}
	}
	return nil
}

func trimNul(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
