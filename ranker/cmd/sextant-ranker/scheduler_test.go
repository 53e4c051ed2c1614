package main

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"

	"sextant.io/sextant/ranker/plugins/bandwidth"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/devices"
	"sextant.io/sextant/ranker/plugins/numa"
	"sextant.io/sextant/ranker/profile"
)

// TestCheckBinder: a profile that enables NUMAAware or DeviceAware must bind with
// SextantBinder; the chart's profile and profile.Plugins (the end-to-end tests' and make
// bench-ranker's) do. For every profile, what checkBinder takes to run at Reserve and at
// Bind is what kube-scheduler's framework runtime builds from it.
func TestCheckBinder(t *testing.T) {
	chart := chartProfile(t)
	if err := checkBinder([]config.KubeSchedulerProfile{*chart}); err != nil {
		t.Errorf("the chart's profile: %v", err)
	}
	agreesWithRuntime(t, chart)
	head := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: s\n"
	for _, tc := range []struct {
		name, plugins string
		wantErr       []string
	}{
		{"the shared profile", profile.Plugins, nil},
		{"default-scheduler alone", "", nil},
		{"NUMAAware with DefaultBinder", `  plugins:
    multiPoint:
      enabled:
      - name: NUMAAware
`, []string{`profile "s"`, "NUMAAware", "SextantBinder", "DefaultBinder"}},
		{"DeviceAware with DefaultBinder", `  plugins:
    multiPoint:
      enabled:
      - name: DeviceAware
`, []string{`profile "s"`, "enables DeviceAware without SextantBinder"}},
		{"both, SextantBinder beside DefaultBinder", `  plugins:
    multiPoint:
      enabled:
      - name: NUMAAware
      - name: DeviceAware
      - name: SextantBinder
`, []string{"NUMAAware and DeviceAware", "disable DefaultBinder"}},
		{"SextantBinder enabled, but not at bind", `  plugins:
    multiPoint:
      enabled:
      - name: NUMAAware
      - name: SextantBinder
      disabled:
      - name: DefaultBinder
    bind:
      enabled:
      - name: DefaultBinder
      disabled:
      - name: SextantBinder
`, []string{"NUMAAware without SextantBinder"}},
		{"DeviceAware at reserve only, SextantBinder at bind", `  plugins:
    reserve:
      enabled:
      - name: DeviceAware
    bind:
      enabled:
      - name: SextantBinder
      disabled:
      - name: '*'
`, nil},
		// multiPoint disabled "*" drops kube-scheduler's defaults, not the plugins
		// listed beside it.
		{"multiPoint replaced, SextantBinder binds", `  plugins:
    multiPoint:
      enabled:
      - name: PrioritySort
      - name: NUMAAware
      - name: SextantBinder
      disabled:
      - name: '*'
`, nil},
		{"multiPoint replaced, DefaultBinder binds", `  plugins:
    multiPoint:
      enabled:
      - name: PrioritySort
      - name: NUMAAware
      - name: DefaultBinder
      disabled:
      - name: '*'
`, []string{"NUMAAware without SextantBinder"}},
		{"NUMAAware not at reserve decides nothing", `  plugins:
    multiPoint:
      enabled:
      - name: NUMAAware
    reserve:
      disabled:
      - name: NUMAAware
`, nil},
		{"BandwidthAware alone needs no binder of ours", `  plugins:
    multiPoint:
      enabled:
      - name: BandwidthAware
`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loadProfile(t, tc.name, head+tc.plugins)
			err := checkBinder([]config.KubeSchedulerProfile{*p})
			agreesWithRuntime(t, p)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	// Every bad profile is named, the good ones not.
	good, bad := *loadProfile(t, "good", head+profile.Plugins), *loadProfile(t, "bad", head+"  plugins:\n    multiPoint:\n      enabled:\n      - name: DeviceAware\n")
	good.SchedulerName, bad.SchedulerName = "good", "bad"
	bad2 := bad
	bad2.SchedulerName = "bad2"
	err := checkBinder([]config.KubeSchedulerProfile{good, bad, bad2})
	if err == nil || strings.Contains(err.Error(), `"good"`) || !strings.Contains(err.Error(), `"bad"`) || !strings.Contains(err.Error(), `"bad2"`) {
		t.Errorf("three profiles, two bad: %v", err)
	}
}

// agreesWithRuntime fails unless enabledAt says of NUMAAware and DeviceAware at Reserve,
// and of SextantBinder and DefaultBinder at Bind, what the framework kube-scheduler
// builds from prof runs there. Stand-ins take the sextant plugins' places: where the
// runtime puts a plugin depends only on its name and the extension points it implements.
func agreesWithRuntime(t *testing.T, prof *config.KubeSchedulerProfile) {
	t.Helper()
	schedmetrics.Register()
	registry := plugins.NewInTreeRegistry()
	stand := func(p fwk.Plugin) frameworkruntime.PluginFactory {
		return func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return p, nil }
	}
	for name, p := range map[string]fwk.Plugin{
		bandwidth.Name: filterStandIn(bandwidth.Name),
		numa.Name:      deciderStandIn(numa.Name),
		devices.Name:   deciderStandIn(devices.Name),
		binder.Name:    binderStandIn(binder.Name),
	} {
		if err := registry.Register(name, stand(p)); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewClientset()
	_, ctx := ktesting.NewTestContext(t)
	fw, err := frameworkruntime.NewFramework(ctx, registry, prof,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(client, 0)),
		frameworkruntime.WithSnapshotSharedLister(schedcache.NewEmptySnapshot()))
	if err != nil {
		t.Fatalf("kube-scheduler's framework refuses the profile: %v", err)
	}
	built := fw.ListPlugins()
	for _, c := range []struct {
		point     string
		set, runs config.PluginSet
		names     []string
	}{
		{"Reserve", prof.Plugins.Reserve, built.Reserve, []string{numa.Name, devices.Name}},
		{"Bind", prof.Plugins.Bind, built.Bind, []string{binder.Name, defaultbinder.Name}},
	} {
		for _, name := range c.names {
			runs := slices.ContainsFunc(c.runs.Enabled, func(p config.Plugin) bool { return p.Name == name })
			if got := enabledAt(prof.Plugins, c.set, name); got != runs {
				t.Errorf("enabledAt(%s, %s) = %t, but the runtime runs it there: %t (%v)", c.point, name, got, runs, c.runs.Enabled)
			}
		}
	}
}

// deciderStandIn implements the extension points through which NUMAAware and DeviceAware
// decide: Filter and Reserve.
type deciderStandIn string

func (p deciderStandIn) Name() string { return string(p) }
func (deciderStandIn) Filter(context.Context, fwk.CycleState, *corev1.Pod, fwk.NodeInfo) *fwk.Status {
	return nil
}
func (deciderStandIn) Reserve(context.Context, fwk.CycleState, *corev1.Pod, string) *fwk.Status {
	return nil
}
func (deciderStandIn) Unreserve(context.Context, fwk.CycleState, *corev1.Pod, string) {}

// --version names sextant's release and the Kubernetes one, and exits before it sets
// anything up.
func TestVersionFlag(t *testing.T) {
	cmd := newSchedulerCommand()
	var out strings.Builder
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	// The flag is kube-scheduler's global one: put it back for the other tests.
	t.Cleanup(func() { _ = cmd.Flags().Set("version", "false") })
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	// A build without the Makefile's -ldflags.
	if want := "sextant-ranker dev (kube-scheduler v0.0.0-master+$Format:%H$)\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
}

// A --config whose profile decides NUMA nodes but binds with DefaultBinder is refused
// before anything starts, naming the profile; a file that does not load names the file.
func TestCommandRefusesConfigWithoutBinder(t *testing.T) {
	dir := t.TempDir()
	bad := dir + "/bad.yaml"
	if err := os.WriteFile(bad, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: numa-only
  plugins:
    multiPoint:
      enabled: [{name: NUMAAware}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{bad, `profile "numa-only" enables NUMAAware without SextantBinder`},
		{dir + "/missing.yaml", "missing.yaml"},
	} {
		cmd := newSchedulerCommand()
		cmd.SetArgs([]string{"--config", tc.file})
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--config %s: %v, want an error containing %q", tc.file, err, tc.want)
		}
		_ = cmd.Flags().Set("config", "")
	}
}

// Bad args of sextant's plugins in --config are refused before any plugin starts (no
// API server here: a plugin that waited for one would hang the test), naming the
// profile, the plugin and the field.
func TestCommandRefusesBadPluginArgs(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, pluginConfig, want string }{
		{"unknown field", `{name: BandwidthAware, args: {ingresWeight: 2}}`, `profile "sextant": decode BandwidthAware args: unknown field "ingresWeight"`},
		{"negative weight", `{name: BandwidthAware, args: {egressWeight: -3}}`, "egressWeight (--bandwidth-egress-weight) -3 is negative"},
		{"unknown window", `{name: BandwidthAware, args: {bestFitWindow: loose}}`, "bestFitWindow"},
		{"args for a plugin without any", `{name: NUMAAware, args: {policy: strict}}`, `NUMAAware args: unknown field "policy": the plugin takes no args`},
		{"args for the binder", `{name: SextantBinder, args: {foo: 1}}`, `SextantBinder args: unknown field "foo"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := dir + "/" + strings.ReplaceAll(tc.name, " ", "-") + ".yaml"
			if err := os.WriteFile(file, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: sextant
  plugins:
    multiPoint:
      enabled: [{name: BandwidthAware}, {name: NUMAAware}, {name: DeviceAware}, {name: SextantBinder}]
      disabled: [{name: DefaultBinder}]
  pluginConfig:
  - `+tc.pluginConfig+`
`), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := newSchedulerCommand()
			cmd.SetArgs([]string{"--config", file})
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			done := make(chan error, 1)
			go func() { done <- cmd.Execute() }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), file) {
					t.Errorf("%v, want an error naming %s and containing %q", err, file, tc.want)
				}
			case <-time.After(time.Minute):
				t.Fatal("the command did not return within a minute: it went on past the bad args")
			}
		})
	}
}

// A bad --bandwidth-* value is refused before any plugin starts (no API server here),
// naming the flag.
func TestCommandRefusesBadBandwidthFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bandwidth-egress-weight", "-1"}, "--bandwidth-egress-weight"},
		{[]string{"--bandwidth-stale-after", "0s"}, "--bandwidth-stale-after"},
		{[]string{"--bandwidth-min-window", "-1s"}, "--bandwidth-min-window"},
	} {
		saved := bandwidth.Defaults
		cmd := newSchedulerCommand()
		bandwidth.RegisterFlags(cmd.Flags())
		cmd.SetArgs(tc.args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		bandwidth.Defaults = saved
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// A word that is not a subcommand is refused naming it and the subcommands.
func TestCommandRefusesUnknownCommand(t *testing.T) {
	cmd := newSchedulerCommand()
	cmd.AddCommand(newCheckCommand())
	err := cmd.Args(cmd, []string{"chek"})
	if err == nil || !strings.Contains(err.Error(), `unknown command "chek"`) || !strings.Contains(err.Error(), "check") {
		t.Errorf("sextant-ranker chek: %v, want an unknown-command error listing check", err)
	}
	if err := cmd.Args(cmd, nil); err != nil {
		t.Errorf("sextant-ranker without arguments: %v", err)
	}
}
