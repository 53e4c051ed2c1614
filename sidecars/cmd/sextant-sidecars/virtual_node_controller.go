package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"sextant.io/sextant/internal/version"
)

// newVirtualNodeControllerCommand runs the virtual-node sidecar controller alone, so it
// can have a service account of its own: the controller may update pods, which the
// admission webhook serving beside it in the webhook command never needs, and the chart's
// pod policy lets only this account rewrite a sidecar's command annotation.
func newVirtualNodeControllerCommand() *cobra.Command {
	cmd, _ := virtualNodeControllerCommand()
	return cmd
}

// virtualNodeControllerCommand is newVirtualNodeControllerCommand with the options its
// flags set.
func virtualNodeControllerCommand() (*cobra.Command, *webhookOptions) {
	o := &webhookOptions{virtualNodes: true}
	cmd := command("virtual-node-controller",
		"Run the virtual-node sidecar controller (without the admission webhook)",
		`virtual-node-controller runs, on the replica that holds the lease --leader-elect-name,
the controller that stops finished sidecars on virtual-kubelet nodes (label
type=virtual-kubelet or taint virtual-kubelet.io/provider) by swapping them in place to
--exit-image. It is what webhook runs with --virtual-nodes, as a process of its
own.`,
		func() error {
			if err := o.validateController(); err != nil {
				return err
			}
			return o.validateMetrics()
		},
		func(ctx context.Context) error { return runVirtualNodeController(ctx, *o) })
	f := cmd.Flags()
	o.addKubeconfigFlag(f)
	o.addControllerFlags(f, "required", "the controller", "the controller")
	addMetricsFlags(f, o)
	o.addLoggingFlags(f)
	return cmd, o
}

func runVirtualNodeController(ctx context.Context, o webhookOptions) error {
	log, err := o.logger("virtual-node-controller")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	reg := newMetricsRegistry()
	stopMetrics, err := o.startMetrics(reg, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	ctrl, elect, err := o.newController(reg, log)
	if err != nil {
		return err
	}
	log.Info("virtual-node controller starting", "version", version.Version, "leaderElect", o.leaderElect)
	runLeading(ctx, elect, ctrl, log)
	return nil
}
