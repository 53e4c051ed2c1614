package main

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"

	"sextant.io/sextant/internal/kubeclient"
	"sextant.io/sextant/internal/version"
	"sextant.io/sextant/sidecars/virtualnode"
)

// command makes one of sextant-sidecars' commands: it takes no arguments, prints no
// usage after a failed run, answers --version, and checks its flags (check) before run
// starts anything.
func command(use, short, long string, check func() error, run func(context.Context) error) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Long: long,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printVersion(cmd) {
				return nil
			}
			if err := check(); err != nil {
				return err
			}
			return run(cmd.Context())
		},
	}
}

// addKubeconfigFlag adds --kubeconfig, read with client-go's rules.
func (o *webhookOptions) addKubeconfigFlag(f *pflag.FlagSet) {
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster configuration)")
}

// addControllerFlags adds the flags of the virtual-node controller, which runs in both
// commands; exitImage says when --exit-image is required, selector what --pod-selector
// narrows, what names the controller in the lease's flags.
func (o *webhookOptions) addControllerFlags(f *pflag.FlagSet, exitImage, selector, what string) {
	f.StringVar(&o.exitImage, "exit-image", "", "image a finished sidecar on a virtual node is swapped to ("+exitImage+")")
	f.StringSliceVar(&o.exitCommand, "exit-command", []string{"/exit0"}, "command of --exit-image that exits 0, written into the sidecar's command annotation")
	f.StringVar(&o.podSelector, "pod-selector", "", "label selector narrowing the pods "+selector+" looks at")
	o.addLeaderFlags(f, what)
}

// startMetrics serves reg's metrics when --metrics-addr is set; stop ends that.
func (o webhookOptions) startMetrics(reg *prometheus.Registry, log logr.Logger) (stop func(), err error) {
	if o.metricsAddr == "" {
		return func() {}, nil
	}
	return serveMetrics(o.metricsAddr, reg, o.metricsLimits, log)
}

// newController makes the virtual-node controller and its leader election (nil without
// --leader-elect) from the flags; runLeading runs them.
func (o webhookOptions) newController(reg prometheus.Registerer, log logr.Logger) (*virtualnode.Controller, *leaderelection.LeaderElectionConfig, error) {
	cfg, err := kubeclient.Config(o.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	cfg.UserAgent = "sextant-sidecar-controller/" + version.Version
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ctrl, err := virtualnode.New(virtualnode.Config{
		ExitImage: o.exitImage, ExitCommand: o.exitCommand, PodSelector: o.podSelector,
		Metrics: virtualnode.NewMetrics(reg),
	}, kube, log)
	if err != nil {
		return nil, nil, err
	}
	elect, err := o.election(kube)
	if err != nil {
		return nil, nil, err
	}
	return ctrl, elect, nil
}
