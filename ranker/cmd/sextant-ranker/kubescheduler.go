package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/server"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"sextant.io/sextant/internal/httpbound"
)

// defaultSecurePortLimits bound kube-scheduler's secure port, which sets a header
// timeout and an idle timeout but no limit on connections, no deadline once a request's
// headers are in and no limit on what a client sends. Its clients are the kubelet's
// probes, Prometheus and a person or two; its answers are /metrics (hundreds of
// kilobytes at most), health checks, and /debug/pprof/profile (30 seconds by default).
var defaultSecurePortLimits = httpbound.ConnLimits{MaxConns: 128, Lifetime: 2 * time.Minute, ReadBytes: 1 << 20}

// secureConnsEvicted counts connections closed to make room for a new one because
// the secure port had its --secure-port-max-connections open.
var secureConnsEvicted = metrics.NewCounter(&metrics.CounterOpts{
	Subsystem:      "sextant_ranker",
	Name:           "secure_port_connections_evicted_total",
	Help:           "Secure-port connections closed, the oldest first, to make room for a new one while --secure-port-max-connections were open.",
	StabilityLevel: metrics.ALPHA,
})

// newKubeSchedulerCommand is app.NewSchedulerCommand with one change: the secure port's
// listener is wrapped in limits (--secure-port-max-connections,
// --secure-port-connection-lifetime, --secure-port-connection-read-bytes), since
// kube-scheduler lets no caller reach its http.Server or handler chain and its options
// are not returned. Everything else is kube-scheduler's own: its options, flag sections,
// logging, Setup and Run.
func newKubeSchedulerCommand(registryOptions ...app.Option) *cobra.Command {
	opts := options.NewOptions()
	limits := defaultSecurePortLimits
	cmd := &cobra.Command{
		Use: "kube-scheduler",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			// Feature gates are set before RunE.
			return opts.ComponentGlobalsRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runKubeScheduler(cmd, opts, limits, registryOptions...)
		},
	}
	nfs := opts.Flags
	bounds := nfs.FlagSet("secure serving")
	bounds.IntVar(&limits.MaxConns, "secure-port-max-connections", limits.MaxConns,
		"Connections the secure port holds open at once (over HTTP/1.1, also requests in flight); a new one past it closes the oldest open, counted in sextant_ranker_secure_port_connections_evicted_total, so that clients holding connections cannot keep the kubelet's probes out.")
	bounds.DurationVar(&limits.Lifetime, "secure-port-connection-lifetime", limits.Lifetime,
		"Each secure-port connection's absolute deadline for reads and writes, from its accept: a slow client holds a connection this long at most, and keep-alive clients reconnect after it. Longer than any /debug/pprof/profile?seconds= you take.")
	bounds.Int64Var(&limits.ReadBytes, "secure-port-connection-read-bytes", limits.ReadBytes,
		"Bytes one secure-port connection may send over its lifetime (its requests, bodies and TLS records together); past it the connection is closed.")
	verflag.AddFlags(nfs.FlagSet("global"))
	globalflag.AddGlobalFlags(nfs.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	fs := cmd.Flags()
	for _, f := range nfs.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, *nfs, cols)
	if err := cmd.MarkFlagFilename("config", "yaml", "yml", "json"); err != nil {
		klog.Background().Error(err, "Failed to mark flag filename")
	}
	return cmd
}

// runKubeScheduler is kube-scheduler's runCommand with the secure port's listener
// wrapped in limits.
func runKubeScheduler(cmd *cobra.Command, opts *options.Options, limits httpbound.ConnLimits, registryOptions ...app.Option) error {
	verflag.PrintAndExitIfRequested()
	if err := limits.Validate("secure-port"); err != nil {
		return err
	}
	fg := opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(opts.Logs, fg); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	cliflag.PrintFlags(cmd.Flags())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-server.SetupSignalHandler()
		cancel()
	}()

	cc, sched, err := app.Setup(ctx, opts, registryOptions...)
	if err != nil {
		return err
	}
	if cc.SecureServing != nil && cc.SecureServing.Listener != nil {
		legacyregistry.MustRegister(secureConnsEvicted)
		cc.SecureServing.Listener = limits.Listener(cc.SecureServing.Listener, secureConnsEvicted.Inc)
	}
	fg.(featuregate.MutableFeatureGate).AddMetrics()
	opts.ComponentGlobalsRegistry.AddMetrics()
	return app.Run(ctx, cc, sched)
}
