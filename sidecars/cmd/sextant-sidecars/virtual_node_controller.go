package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"sextant.io/sextant/internal/kubeclient"
	"sextant.io/sextant/internal/version"
	"sextant.io/sextant/sidecars/virtualnode"
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
	cmd := &cobra.Command{
		Use:   "virtual-node-controller",
		Short: "Run the virtual-node sidecar controller (without the admission webhook)",
		Long: `virtual-node-controller runs, on the replica that holds the lease --leader-elect-name,
the controller that stops finished sidecars on virtual-kubelet nodes (label
type=virtual-kubelet or taint virtual-kubelet.io/provider) by swapping them in place to
--exit-image. It is what webhook runs with --virtual-nodes, as a process of its
own.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printVersion(cmd) {
				return nil
			}
			if err := o.validateController(); err != nil {
				return err
			}
			if err := o.validateMetrics(); err != nil {
				return err
			}
			return runVirtualNodeController(cmd.Context(), *o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster configuration)")
	f.StringVar(&o.exitImage, "exit-image", "", "image a finished sidecar on a virtual node is swapped to (required)")
	f.StringSliceVar(&o.exitCommand, "exit-command", []string{"/exit0"}, "command of --exit-image that exits 0, written into the sidecar's command annotation")
	addMetricsFlags(f, o)
	f.StringVar(&o.podSelector, "pod-selector", "", "label selector narrowing the pods the controller looks at")
	o.addLeaderFlags(f, "the controller")
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
	if o.metricsAddr != "" {
		stopMetrics, err := serveMetrics(o.metricsAddr, reg, o.metricsLimits, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	cfg, err := kubeclient.Config(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "sextant-sidecar-controller/" + version.Version
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	ctrl, err := virtualnode.New(virtualnode.Config{
		ExitImage: o.exitImage, ExitCommand: o.exitCommand, PodSelector: o.podSelector,
		Metrics: virtualnode.NewMetrics(reg),
	}, kube, log)
	if err != nil {
		return err
	}
	elect, err := o.election(kube)
	if err != nil {
		return err
	}
	log.Info("virtual-node controller starting", "version", version.Version, "leaderElect", o.leaderElect)
	runLeading(ctx, elect, ctrl, log)
	return nil
}
