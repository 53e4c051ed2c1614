package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	kubeversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"

	"sextant.io/sextant/internal/version"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/bandwidth"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/devices"
	"sextant.io/sextant/ranker/plugins/numa"
	"sextant.io/sextant/ranker/plugins/pluginargs"
)

// newSchedulerCommand is kube-scheduler's own command (newKubeSchedulerCommand: its
// app.NewSchedulerCommand with the secure port bounded) with sextant's steps run before it: --version naming sextant's release, the sextant profile
// when there is no --config, and checkBinder and checkPluginArgs on the profiles of
// --config. Every kube-scheduler flag is its own. Go's garbage collector is set by the
// environment (GOGC, GOMEMLIMIT), as the chart does.
func newSchedulerCommand(registryOptions ...app.Option) *cobra.Command {
	cmd := newKubeSchedulerCommand(registryOptions...)
	cmd.Use = "sextant-ranker"
	cmd.Long = `sextant-ranker is kube-scheduler with sextant's plugins registered: BandwidthAware,
NUMAAware, DeviceAware and SextantBinder. Without --config it serves one profile,
schedulerName "sextant", with all of them (the chart's plugins; the --bandwidth-*
flags are BandwidthAware's args) and leader election on the lease "sextant-ranker".
With --config, enable them in a profile of the KubeSchedulerConfiguration; a profile
that enables NUMAAware or DeviceAware must bind with SextantBinder instead of
DefaultBinder, or sextant-ranker does not start. Every kube-scheduler flag applies.`
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		// --version names sextant's release and the Kubernetes one (kube-scheduler's
		// would say "Kubernetes" alone); --version=raw prints kube-scheduler's.
		if printVersion(cmd) {
			return nil
		}
		// Before any plugin starts: a plugin's own check would come only after the
		// heartbeat store synced, in whichever order the profiles build their plugins.
		if err := bandwidth.Defaults.Validate(); err != nil {
			return fmt.Errorf("--bandwidth-* flags: %w", err)
		}
		if err := prepareConfig(cmd.Flags().Lookup("config").Value.String()); err != nil {
			return err
		}
		// kube-scheduler builds every plugin before it writes the configuration and
		// exits; the plugins' heartbeat store would wait for an API server first.
		if f := cmd.Flags().Lookup("write-config-to"); f != nil && f.Value.String() != "" {
			heartbeat.Offline()
		}
		return run(cmd, args)
	}
	// kube-scheduler takes no arguments; sextant-ranker's only ones are its subcommands,
	// so a word that is none of them is one mistyped.
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		for _, arg := range args {
			if arg != "" {
				var names []string
				for _, sub := range cmd.Commands() {
					if sub.IsAvailableCommand() {
						names = append(names, sub.Name())
					}
				}
				return fmt.Errorf("unknown command %q: sextant-ranker takes flags only, or one of the commands %s", arg, strings.Join(names, ", "))
			}
		}
		return nil
	}
	return cmd
}

// printVersion handles the global --version, in the root command and in each subcommand
// alike: it prints sextant's release and the Kubernetes one (--version=raw: Kubernetes'
// build information) and reports whether the command should then stop.
func printVersion(cmd *cobra.Command) bool {
	f := cmd.Flags().Lookup("version")
	if f == nil {
		return false
	}
	switch f.Value.String() {
	case "true":
		fmt.Fprintf(cmd.OutOrStdout(), "sextant-ranker %s (kube-scheduler %s)\n", version.Version, kubeversion.Get().GitVersion)
	case "raw":
		fmt.Fprintf(cmd.OutOrStdout(), "%#v\n", kubeversion.Get())
	default:
		return false
	}
	return true
}

// prepareConfig makes kube-scheduler serve the sextant profile when there is no
// configuration file, and otherwise loads the file as kube-scheduler will (with its
// defaults) to refuse profiles checkBinder refuses, before anything starts.
func prepareConfig(file string) error {
	if file == "" {
		return serveSextantProfileByDefault()
	}
	cfg, err := options.LoadConfigFromFile(klog.Background(), file)
	if err != nil {
		return fmt.Errorf("--config %s: %w", file, err)
	}
	if err := errors.Join(checkBinder(cfg.Profiles), checkPluginArgs(cfg.Profiles)); err != nil {
		return fmt.Errorf("--config %s: %w", file, err)
	}
	return nil
}

// checkPluginArgs refuses the args of sextant's plugins that their constructors would
// refuse. kube-scheduler builds a profile's plugins in no fixed order, and NUMAAware and
// DeviceAware wait for the heartbeat lists in theirs: without this, a typo in
// BandwidthAware's args was reported only when the API server answered, or never when
// it did not.
func checkPluginArgs(profiles []config.KubeSchedulerProfile) error {
	var errs []error
	for _, p := range profiles {
		for _, pc := range p.PluginConfig {
			var err error
			switch pc.Name {
			case bandwidth.Name:
				err = bandwidth.CheckArgs(pc.Args)
			case numa.Name, devices.Name, binder.Name:
				err = pluginargs.None(pc.Name, pc.Args)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("profile %q: %w", p.SchedulerName, err))
			}
		}
	}
	return errors.Join(errs...)
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
