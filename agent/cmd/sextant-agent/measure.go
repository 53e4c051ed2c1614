package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"sextant.io/sextant/agent/bandwidth"
	"sextant.io/sextant/agent/bandwidth/tc"
)

type measureOptions struct {
	interfaces []string
	duration   time.Duration
	output     string
	attachMode string
	sysfsRoot  string
	netns      string
}

func newMeasureCommand() *cobra.Command {
	o := measureOptions{}
	cmd := &cobra.Command{
		Use:   "measure",
		Short: "Attach the eBPF meter to NICs for a while and print what it counted",
		Long: `measure attaches sextant's eBPF meter to tc ingress and egress of the chosen
interfaces, counts for --duration (or until interrupted), detaches, and prints the
bytes, packets and average bits per second it saw in each direction. It needs no
cluster, only root (or CAP_BPF and CAP_NET_ADMIN).

It is observe-only and shares the interfaces with whatever else is attached: other
tc programs and filters keep running, and a running sextant agent keeps its own.`,
		Example: `  sextant-agent measure --interface eth0 --duration 30s
  sextant-agent measure --interface eth0 --interface eth1 --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMeasure(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.interfaces, "interface", nil, "interface to measure; repeat for more (default: the physical NICs, not SR-IOV virtual functions, plus the default-route interface)")
	f.DurationVar(&o.duration, "duration", 10*time.Second, "how long to count; Ctrl-C stops early and reports what was counted so far")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	f.StringVar(&o.attachMode, "attach-mode", "auto", "how to attach: auto (tcx where the kernel has it, else clsact), tcx or clsact")
	f.StringVar(&o.sysfsRoot, "sysfs-root", "/", "directory holding sys/class/net, used to find physical NICs for the default selection")
	f.StringVar(&o.netns, "netns", "", "network namespace to measure in, as a path such as /var/run/netns/NAME (default: the current one)")
	return cmd
}

type measureResult struct {
	DurationSeconds float64            `json:"durationSeconds"`
	Interfaces      []measureInterface `json:"interfaces"`
}

type measureInterface struct {
	Name    string           `json:"name"`
	Ingress measureDirection `json:"ingress"`
	Egress  measureDirection `json:"egress"`
}

type measureDirection struct {
	Bytes   uint64 `json:"bytes"`
	Packets uint64 `json:"packets"`
	// BitsPerSecond is whole bits per second, as the contract's output shows: a
	// fraction of a bit says nothing about a NIC.
	BitsPerSecond uint64 `json:"bitsPerSecond"`
}

func runMeasure(ctx context.Context, out io.Writer, o measureOptions) error {
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("--output %q: want table or json", o.output)
	}
	if o.duration <= 0 {
		return fmt.Errorf("--duration %s: want a positive duration such as 10s", o.duration)
	}
	mode, err := parseAttachMode(o.attachMode)
	if err != nil {
		return err
	}
	if err := checkSysfsRoot(o.sysfsRoot); err != nil {
		return err
	}
	if err := checkNetns(o.netns); err != nil {
		return err
	}

	links, err := bandwidth.SystemLinks{SysfsRoot: o.sysfsRoot, NetnsPath: o.netns}.Links()
	if err != nil {
		return err
	}
	var chosen []bandwidth.Link
	for _, name := range o.interfaces {
		i := slices.IndexFunc(links, func(l bandwidth.Link) bool { return l.Name == name })
		if i < 0 {
			return fmt.Errorf("--interface %s: no such interface", name)
		}
		if !slices.ContainsFunc(chosen, func(l bandwidth.Link) bool { return l.Name == name }) {
			chosen = append(chosen, links[i])
		}
	}
	if len(o.interfaces) == 0 {
		for _, l := range links {
			if bandwidth.DefaultSelected(l) {
				chosen = append(chosen, l)
			}
		}
		if len(chosen) == 0 {
			return errors.New("no physical NIC and no default route found: name interfaces with --interface")
		}
	}

	b, err := bandwidth.LoadBPF(tc.Options{Mode: mode, NetnsPath: o.netns})
	if err != nil {
		return err
	}
	defer b.Close()
	for _, l := range chosen {
		if err := b.Attach(l.Index); err != nil {
			return fmt.Errorf("attach to %s: %w", l.Name, err)
		}
	}
	start := time.Now()
	before, err := b.Read()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	timer := time.NewTimer(o.duration)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}

	after, err := b.Read()
	elapsed := time.Since(start).Seconds()
	if err != nil {
		return err
	}
	if err := b.Close(); err != nil {
		return fmt.Errorf("detach: %w", err)
	}

	res := measureResult{DurationSeconds: elapsed, Interfaces: []measureInterface{}}
	dir := func(a, b bandwidth.Count) measureDirection {
		d := measureDirection{Bytes: a.Bytes - b.Bytes, Packets: a.Packets - b.Packets}
		d.BitsPerSecond = uint64(math.Round(float64(d.Bytes) * 8 / elapsed))
		return d
	}
	for _, l := range chosen {
		a, b := after[l.Index], before[l.Index]
		res.Interfaces = append(res.Interfaces, measureInterface{
			Name:    l.Name,
			Ingress: dir(a.Ingress, b.Ingress),
			Egress:  dir(a.Egress, b.Egress),
		})
	}
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "INTERFACE\tIN BYTES\tIN PACKETS\tIN RATE\tOUT BYTES\tOUT PACKETS\tOUT RATE\t\n")
	for _, i := range res.Interfaces {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s\t\n", i.Name,
			i.Ingress.Bytes, i.Ingress.Packets, humanBits(float64(i.Ingress.BitsPerSecond)),
			i.Egress.Bytes, i.Egress.Packets, humanBits(float64(i.Egress.BitsPerSecond)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "counted for %.1fs, attached with %s\n", elapsed, b.Mode())
	return err
}

// humanBits formats bits/s with SI prefixes, as link speeds are quoted.
func humanBits(v float64) string {
	for _, u := range []struct {
		div  float64
		unit string
	}{{1e12, "Tbit/s"}, {1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}} {
		if v >= u.div {
			return fmt.Sprintf("%.2f %s", v/u.div, u.unit)
		}
	}
	return fmt.Sprintf("%.0f bit/s", v)
}
