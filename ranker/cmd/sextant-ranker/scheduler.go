package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/server"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	kubeversion "k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"

	"sextant.io/sextant/internal/version"
	"sextant.io/sextant/ranker/gcsettings"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/devices"
	"sextant.io/sextant/ranker/plugins/numa"
)

// newSchedulerCommand is kube-scheduler's app.NewSchedulerCommand (v1.36) with steps
// added: the GC settings of gc (nil: none) once logging is set up, and checkBinder
// between app.Setup and app.Run. kube-scheduler has no hook
// there, and the options that app.Setup and app.Run take are local to
// app.NewSchedulerCommand, hence the copy; TestSchedulerCommandFlags keeps its flags
// equal to kube-scheduler's.
func newSchedulerCommand(gc *gcsettings.Options, registryOptions ...app.Option) *cobra.Command {
	opts := options.NewOptions()
	cmd := &cobra.Command{
		Use: "sextant-ranker",
		Long: `sextant-ranker is kube-scheduler with sextant's plugins registered: BandwidthAware,
NUMAAware, DeviceAware and SextantBinder. Without --config it serves one profile,
schedulerName "sextant", with all of them (the chart's plugins; the --bandwidth-*
flags are BandwidthAware's args) and leader election on the lease "sextant-ranker".
With --config, enable them in a profile of the KubeSchedulerConfiguration; a profile
that enables NUMAAware or DeviceAware must bind with SextantBinder instead of
DefaultBinder, or sextant-ranker does not start. Every kube-scheduler flag applies.`,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			// Feature gates must be set before RunE.
			return opts.ComponentGlobalsRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runScheduler(cmd, opts, gc, registryOptions...)
		},
		Args: func(cmd *cobra.Command, args []string) error {
			for _, arg := range args {
				if len(arg) > 0 {
					return fmt.Errorf("%q does not take any arguments, got %q", cmd.CommandPath(), args)
				}
			}
			return nil
		},
	}
	nfs := opts.Flags
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

// runScheduler is kube-scheduler's runCommand with the GC settings applied after logging,
// and checkBinder after Setup: the profiles are known only
// once Setup has loaded the configuration with kube-scheduler's defaults, and the
// scheduler has not run yet.
func runScheduler(cmd *cobra.Command, opts *options.Options, gc *gcsettings.Options, registryOptions ...app.Option) error {
	// --version names sextant's release and the Kubernetes one (kube-scheduler's would
	// say "Kubernetes" alone); --version=raw prints kube-scheduler's version info.
	if f := cmd.Flags().Lookup("version"); f != nil && f.Value.String() == "true" {
		fmt.Fprintf(cmd.OutOrStdout(), "sextant-ranker %s (kube-scheduler %s)\n", version.Version, kubeversion.Get().GitVersion)
		return nil
	}
	verflag.PrintAndExitIfRequested()
	fg := opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	// Logging first, so that the flags are printed with the final configuration.
	if err := logsapi.ValidateAndApply(opts.Logs, fg); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	cliflag.PrintFlags(cmd.Flags())
	if gc != nil {
		if err := applyGCSettings(gc); err != nil {
			return err
		}
	}

	if opts.ConfigFile == "" {
		if err := serveSextantProfileByDefault(); err != nil {
			return err
		}
	}

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
	if err := checkBinder(cc.ComponentConfig.Profiles); err != nil {
		return err
	}
	fg.(featuregate.MutableFeatureGate).AddMetrics()
	opts.ComponentGlobalsRegistry.AddMetrics()
	return app.Run(ctx, cc, sched)
}

func applyGCSettings(gc *gcsettings.Options) error {
	a, err := gc.Apply(os.Getenv)
	if err != nil {
		return err
	}
	if a.CgroupErr != nil {
		klog.ErrorS(a.CgroupErr, "No soft memory limit: the container's cgroup memory limit could not be read")
	}
	klog.InfoS("Go GC settings", "gcPercent", a.GCPercent, "gcPercentFrom", a.GCPercentFrom,
		"memoryLimitBytes", a.MemoryLimitBytes, "memoryLimitFrom", a.MemoryLimitFrom, "cgroupMemoryLimitBytes", a.CgroupLimitBytes)
	return nil
}

// checkBinder refuses profiles that enable NUMAAware or DeviceAware without SextantBinder
// as their binder: their decisions reach a pod only on its Binding (the ranker may not
// patch pods, and an admission policy refuses the annotations on any pod write), so such
// a profile would decide what no node carries out. Their Reserve would fail for every
// pod with a decision; this says so at startup instead, naming each such profile. A
// plugin counts as enabled where it decides, at Reserve; the binder must be SextantBinder
// without DefaultBinder at Bind (the first binder that does not skip binds, and
// DefaultBinder binds without the annotations).
func checkBinder(profiles []config.KubeSchedulerProfile) error {
	var errs []error
	for _, p := range profiles {
		if p.Plugins == nil {
			continue
		}
		var deciders []string
		for _, name := range []string{numa.Name, devices.Name} {
			if enabledAt(p.Plugins, p.Plugins.Reserve, name) {
				deciders = append(deciders, name)
			}
		}
		if len(deciders) == 0 {
			continue
		}
		if !enabledAt(p.Plugins, p.Plugins.Bind, binder.Name) || enabledAt(p.Plugins, p.Plugins.Bind, defaultbinder.Name) {
			errs = append(errs, fmt.Errorf("profile %q enables %s without %s as its binder: enable %s (e.g. under multiPoint) and disable %s, since their decisions reach a pod only on the Binding %s makes",
				p.SchedulerName, strings.Join(deciders, " and "), binder.Name, binder.Name, defaultbinder.Name, binder.Name))
		}
	}
	return errors.Join(errs...)
}

// enabledAt reports whether plugin name runs at the extension point set of a profile
// with kube-scheduler's defaults applied (as loaded from --config), by the rule of its
// framework runtime: enabled at the point itself, or enabled under multiPoint and not
// disabled at the point (by name or "*"). multiPoint's own disabled list is not
// consulted: the defaults were merged into multiPoint's enabled list with it already, so
// multiPoint disabled "*" drops kube-scheduler's defaults but not the plugins listed
// beside it. TestCheckBinder holds this to what the runtime builds. Whether the plugin
// implements the point is not checked: the callers ask only where their plugins do.
func enabledAt(plugins *config.Plugins, set config.PluginSet, name string) bool {
	for _, p := range set.Enabled {
		if p.Name == name {
			return true
		}
	}
	for _, p := range set.Disabled {
		if p.Name == name || p.Name == "*" {
			return false
		}
	}
	for _, p := range plugins.MultiPoint.Enabled {
		if p.Name == name {
			return true
		}
	}
	return false
}
