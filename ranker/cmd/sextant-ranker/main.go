// Command sextant-ranker is kube-scheduler with sextant's plugins registered:
// BandwidthAware, NUMAAware, DeviceAware, and SextantBinder, which binds with the
// annotations the others chose carried on the Binding. It takes every kube-scheduler
// flag; a KubeSchedulerConfiguration (--config) enables the plugins in a profile, usually
// "sextant" (see charts/sextant/templates/ranker-config.yaml); without --config it serves
// the profile "sextant" with every sextant plugin. The --bandwidth-* flags set
// BandwidthAware's defaults; args in the configuration override them. Go's garbage
// collector takes GOGC and GOMEMLIMIT from the environment (the chart's ranker.gc).
//
// The admission webhook and the virtual-node sidecar controller are not the ranker's:
// they are sextant-sidecars (sidecars/cmd/sextant-sidecars).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // JSON logging, as in kube-scheduler
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"sextant.io/sextant/ranker/plugins/bandwidth"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/devices"
	"sextant.io/sextant/ranker/plugins/numa"
)

func main() {
	command := newSchedulerCommand(
		app.WithPlugin(bandwidth.Name, bandwidth.New),
		app.WithPlugin(numa.Name, numa.New),
		app.WithPlugin(devices.Name, devices.New),
		app.WithPlugin(binder.Name, binder.New),
	)
	command.AddCommand(newCheckCommand())
	sextantFlags := pflag.NewFlagSet("sextant", pflag.ExitOnError)
	bandwidth.RegisterFlags(sextantFlags)
	command.Flags().AddFlagSet(sextantFlags)
	// kube-scheduler prints its flags by section; add sextant's as one more.
	usage := command.UsageFunc()
	command.SetUsageFunc(func(cmd *cobra.Command) error {
		if err := usage(cmd); err != nil {
			return err
		}
		_, err := fmt.Fprintf(cmd.OutOrStderr(), "\nSextant flags:\n\n%s", sextantFlags.FlagUsagesWrapped(0))
		return err
	})
	// kube-scheduler's help prints flag sections only; sextant-ranker's subcommands are
	// listed after them. A subcommand's own help is cobra's, unchanged.
	help := command.HelpFunc()
	command.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		help(cmd, args)
		if cmd != command {
			return
		}
		fmt.Fprintf(cmd.OutOrStdout(), "\nSextant flags:\n\n%s", sextantFlags.FlagUsagesWrapped(0))
		fmt.Fprintf(cmd.OutOrStdout(), "\nCommands (sextant-ranker COMMAND --help for each):\n\n")
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(cmd.OutOrStdout(), "  %-26s %s\n", sub.Name(), sub.Short)
			}
		}
	})
	os.Exit(cli.Run(command))
}
