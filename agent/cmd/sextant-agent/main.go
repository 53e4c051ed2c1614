// Command sextant-agent is sextant's per-node agent. Its subcommands also work on their
// own, without a cluster: `topology` prints what the agent reads from sysfs and
// `measure` attaches the eBPF meter to NICs for a while and prints what it counted.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json, as in kube-scheduler

	"sextant.io/sextant/internal/version"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sextant-agent:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "sextant-agent",
		Short:         "sextant's node agent: NIC bandwidth, topology and sidecar termination",
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newRunCommand(),
		newTopologyCommand(),
		newMeasureCommand(),
		newUnshapeCommand(),
	)
	return root
}
