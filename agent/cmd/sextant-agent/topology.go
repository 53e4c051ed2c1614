package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"sextant.io/sextant/agent/topology"
	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

func newTopologyCommand() *cobra.Command {
	var (
		root   string
		output string
		seed   string
	)
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Print the NUMA, CPU, memory, PCI device and NIC topology the agent reads from sysfs",
		Long: `Print the topology the agent would publish as this node's NodeTopology: NUMA nodes
with their online CPUs, memory and distances, PCI devices with their kind, NUMA node,
PCIe root and health, and network interfaces with their PCI function and speed.

It reads only files under --sysfs-root (its sys/ and proc/), so it also works on a
copied tree of another machine. Items the tree says nothing about are left out or
null, with a warning on stderr; malformed NUMA data is an error naming the file.`,
		Example: `  sextant-agent topology
  sextant-agent topology --sysfs-root /host --output json
  sextant-agent topology --sysfs-root ./tree --previous last.json --output json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("--output must be table or json, not %q", output)
			}
			if err := checkSysfsRoot(root); err != nil {
				return err
			}
			snap, err := topology.Read(root)
			if err != nil {
				return err
			}
			for _, w := range snap.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			topo := snap.Topology
			var prev []v1alpha1.PCIDevice
			if seed != "" {
				if prev, err = readPrevious(seed); err != nil {
					return err
				}
			}
			topo.PCIDevices = topology.NewTracker(prev).Update(topo.PCIDevices)
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(topo)
			}
			return writeTable(cmd.OutOrStdout(), topo)
		},
	}
	cmd.Flags().StringVar(&root, "sysfs-root", "/", "directory holding the sys/ and proc/ trees to read (in a container: where the host's are mounted)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	cmd.Flags().StringVar(&seed, "previous", "", "JSON of a previous run (its pciDevices); devices it lists that are now gone or disabled are shown Unhealthy")
	return cmd
}

// readPrevious reads the pciDevices of an earlier `topology --output json`.
func readPrevious(file string) ([]v1alpha1.PCIDevice, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading --previous: %w", err)
	}
	const form = "want the output of sextant-agent topology --output json"
	// The list is kept raw to tell a missing key from null, which a node without PCI
	// devices writes.
	var t map[string]json.RawMessage
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("parsing --previous %s: not a JSON object (%v); %s", file, err, form)
	}
	// Without the list, every vanished device would go unmarked: a file that is not a
	// topology (or one with the key misspelt) is refused rather than read as empty.
	list, ok := t["pciDevices"]
	if !ok {
		return nil, fmt.Errorf("--previous %s: no pciDevices list; %s", file, form)
	}
	var devices []v1alpha1.PCIDevice
	if err := json.Unmarshal(list, &devices); err != nil {
		return nil, fmt.Errorf("parsing --previous %s: pciDevices: %w; %s", file, err, form)
	}
	// The address is what a device is tracked by: an entry without a real one would be
	// shown as a vanished device that never existed, and a repeated one would hide
	// which record is meant. The API server refuses both in a NodeTopology.
	seen := make(map[string]int, len(devices))
	for i, d := range devices {
		if !annotations.IsPCIAddress(d.Address) {
			return nil, fmt.Errorf("--previous %s: pciDevices[%d].address %q: want a PCI address such as 0000:3b:00.0; %s", file, i, d.Address, form)
		}
		if j, dup := seen[d.Address]; dup {
			return nil, fmt.Errorf("--previous %s: pciDevices[%d] and [%d] both have address %s; %s", file, j, i, d.Address, form)
		}
		seen[d.Address] = i
	}
	return devices, nil
}

func writeTable(out io.Writer, t v1alpha1.Topology) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NUMA\tCPUS\tMEMORY\tDISTANCES\tNICS\tDEVICES")
	for _, n := range t.NUMANodes {
		var nics []string
		for _, nic := range t.NICs {
			if nic.NUMANode != nil && *nic.NUMANode == n.ID {
				nics = append(nics, nic.Name)
			}
		}
		kinds := map[v1alpha1.DeviceKind]int{}
		for _, d := range t.PCIDevices {
			if d.NUMANode != nil && *d.NUMANode == n.ID {
				kinds[d.Kind]++
			}
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", n.ID, orDash(topology.FormatCPUList(n.CPUs)),
			formatBytes(n.MemoryBytes), orDash(joinInts(n.Distances)), orDash(strings.Join(nics, ",")), orDash(formatKinds(kinds)))
	}
	if err := w.Flush(); err != nil {
		return err
	}

	if len(t.PCIDevices) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(w, "PCI DEVICE\tKIND\tCLASS\tVENDOR:DEVICE\tDRIVER\tNUMA\tPCIE ROOT\tHEALTH")
		for _, d := range t.PCIDevices {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s:%s\t%s\t%s\t%s\t%s\n", d.Address, d.Kind, d.Class,
				strings.TrimPrefix(d.Vendor, "0x"), strings.TrimPrefix(d.Device, "0x"),
				orDash(d.Driver), formatNode(d.NUMANode), orDash(d.PCIeRoot), d.Health)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}

	if len(t.NICs) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(w, "NIC\tPCI ADDRESS\tNUMA\tSPEED")
		for _, n := range t.NICs {
			addr := "-"
			if n.PCIAddress != nil {
				addr = *n.PCIAddress
			}
			speed := "-"
			if n.SpeedMbps != nil {
				speed = strconv.FormatInt(*n.SpeedMbps, 10) + " Mb/s"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", n.Name, addr, formatNode(n.NUMANode), speed)
		}
	}
	return w.Flush()
}

// formatKinds lists device counts with the kinds a pod can ask for first: "2 gpu, 1 nic, 14 other".
func formatKinds(kinds map[v1alpha1.DeviceKind]int) string {
	var parts []string
	for _, k := range []v1alpha1.DeviceKind{v1alpha1.KindGPU, v1alpha1.KindNIC, v1alpha1.KindNVMe, v1alpha1.KindAccelerator, v1alpha1.KindOther} {
		if kinds[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", kinds[k], k))
		}
	}
	return strings.Join(parts, ", ")
}

func formatNode(n *int32) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(int(*n))
}

func formatBytes(b int64) string {
	const gib = 1 << 30
	if b >= gib {
		return strconv.FormatFloat(float64(b)/gib, 'f', 1, 64) + " GiB"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB"
}

func joinInts(v []int32) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(int(x))
	}
	return strings.Join(s, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
