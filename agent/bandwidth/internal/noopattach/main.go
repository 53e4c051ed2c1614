// Command noopattach attaches a do-nothing tc program (named sextant_noop) to
// ingress and egress of an interface, exactly as the meter is attached, and
// keeps it there until interrupted. scripts/bench-meter.sh runs it to measure
// what the kernel's BPF statistics report for a program that does nothing:
// the floor under any run_time_ns/run_cnt on this machine (the two clock reads
// and the indirect call around every run), to subtract from the meter's.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"sextant.io/sextant/agent/bandwidth/tc"
)

func main() {
	iface := flag.String("interface", "", "interface to attach to")
	nsPath := flag.String("netns", "", "network namespace path (default: current)")
	flag.Parse()
	if err := run(*iface, *nsPath); err != nil {
		fmt.Fprintln(os.Stderr, "noopattach:", err)
		os.Exit(1)
	}
}

func run(iface, nsPath string) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	spec := &ebpf.ProgramSpec{
		Name:    "sextant_noop",
		Type:    ebpf.SchedCLS,
		License: "MIT",
		// return TC_ACT_UNSPEC, as the meter does
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()},
	}
	in, err := ebpf.NewProgram(spec)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer in.Close()
	eg, err := in.Clone()
	if err != nil {
		return err
	}
	defer eg.Close()

	h, err := handle(nsPath)
	if err != nil {
		return err
	}
	l, err := h.LinkByName(iface)
	h.Close()
	if err != nil {
		return fmt.Errorf("find %s: %w", iface, err)
	}
	att, err := tc.New(tc.Options{NetnsPath: nsPath})
	if err != nil {
		return err
	}
	defer att.Close()
	if err := att.Attach(l.Attrs().Index, tc.Programs{Ingress: in, Egress: eg}); err != nil {
		return err
	}
	fmt.Println("attached")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return nil
}

func handle(nsPath string) (*netlink.Handle, error) {
	if nsPath == "" {
		return netlink.NewHandle()
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}
