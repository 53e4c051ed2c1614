// Command shapeharness shapes one interface as the agent's enforcement does, without a
// cluster, and keeps it shaped until interrupted; then it gives the interface back.
// scripts/bench-enforce.sh runs it to measure what enforcement costs a node's traffic:
// each --pod address gets a class that guarantees it --required each way and caps it at
// nothing (the interface's shaped rate), so the traffic goes through the classifier,
// the HTB root, the IFB and their classes, and no shaping binds.
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/cilium/ebpf/rlimit"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/agent/enforce"
	"sextant.io/sextant/api/annotations"
)

type podFlags []string

func (p *podFlags) String() string     { return strings.Join(*p, ",") }
func (p *podFlags) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	iface := flag.String("interface", "", "interface to shape")
	nsPath := flag.String("netns", "", "network namespace path (default: current)")
	capacity := flag.Float64("capacity", 100e9, "the interface's capacity in bits/s, each way")
	required := flag.String("required", "1M", "what each pod requires each way")
	shaped := flag.Float64("shaped-share", enforce.DefaultShares.Shaped, "the fraction of the capacity the interface is shaped to")
	stateDir := flag.String("state-dir", "", "the shaper's state directory (default: a temporary one)")
	var pods podFlags
	flag.Var(&pods, "pod", "a pod's address (repeatable)")
	flag.Parse()
	shares := enforce.Shares{Shaped: *shaped, Unreserved: enforce.DefaultShares.Unreserved}
	if err := run(*iface, *nsPath, *stateDir, *capacity, *required, shares, pods); err != nil {
		fmt.Fprintln(os.Stderr, "shapeharness:", err)
		os.Exit(1)
	}
}

func run(iface, nsPath, stateDir string, capacity float64, required string, shares enforce.Shares, addrs []string) error {
	if err := shares.Validate(); err != nil {
		return err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	if stateDir == "" {
		dir, err := os.MkdirTemp("", "shapeharness")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		stateDir = dir
	}
	req, err := annotations.ParseBandwidth(map[string]string{annotations.IngressRequired: required, annotations.EgressRequired: required})
	if err != nil {
		return err
	}
	var pods []enforce.Pod
	for i, a := range addrs {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return fmt.Errorf("--pod %q: %w", a, err)
		}
		pods = append(pods, enforce.Pod{UID: types.UID(fmt.Sprintf("pod-%d", i)), Name: "bench/" + a, Addresses: []netip.Addr{addr}, Request: req})
	}
	s, err := enforce.NewShaper(nsPath, stateDir, logr.Discard())
	if err != nil {
		return err
	}
	defer s.Close()
	networks := []enforce.Network{{Name: annotations.PodNetwork, Interfaces: []enforce.Interface{{Name: iface, Capacity: [2]float64{capacity, capacity}}}}}
	plan := enforce.MakePlan(networks, pods, shares, s.State())
	if p := plan.Networks[0].Problem; p != "" {
		return fmt.Errorf("cannot shape: %s", p)
	}
	if err := s.Classify(pods, plan.Classified); err != nil {
		return err
	}
	if err := s.Shape(plan.Networks[0].Interfaces[0]); err != nil {
		return err
	}
	fmt.Println("shaped", iface)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return enforce.Teardown(s)
}
