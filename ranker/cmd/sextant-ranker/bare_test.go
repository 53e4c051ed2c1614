package main

import (
	"reflect"
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"
	"sigs.k8s.io/yaml"

	"sextant.io/sextant/ranker/plugins/bandwidth"
	"sextant.io/sextant/ranker/profile"
)

// Without --config, sextant-ranker serves the chart's profile under its default name,
// with no BandwidthAware args (the --bandwidth-* flags are its args), and leader
// election on its own lease; the configuration checked is the one app.Setup starts from.
func TestBareConfigurationIsTheChartsProfile(t *testing.T) {
	before, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Profiles) != 1 || before.Profiles[0].SchedulerName != "default-scheduler" {
		t.Fatalf("kube-scheduler's own default configuration: profiles %v", before.Profiles)
	}
	if err := serveSextantProfileByDefault(); err != nil {
		t.Fatal(err)
	}
	// Put kube-scheduler's defaulting back for the other tests.
	t.Cleanup(func() {
		if err := schedv1.RegisterDefaults(scheme.Scheme); err != nil {
			t.Error(err)
		}
	})
	cfg, err := latest.Default()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Profiles) != 1 {
		t.Fatalf("the bare configuration has %d profiles, want 1", len(cfg.Profiles))
	}
	got := cfg.Profiles[0]
	if got.SchedulerName != profile.SchedulerName {
		t.Errorf("the bare profile is %q, want %q", got.SchedulerName, profile.SchedulerName)
	}
	chart := chartProfile(t)
	if chart.SchedulerName != profile.SchedulerName {
		t.Errorf("the chart's default schedulerName is %q, profile.SchedulerName %q", chart.SchedulerName, profile.SchedulerName)
	}
	if !reflect.DeepEqual(got.Plugins, chart.Plugins) {
		want, _ := yaml.Marshal(chart.Plugins)
		have, _ := yaml.Marshal(got.Plugins)
		t.Errorf("the bare profile enables:\n%s\nthe chart's profile:\n%s", have, want)
	}
	for _, pc := range got.PluginConfig {
		if pc.Name == bandwidth.Name {
			t.Errorf("the bare profile has %s args %v: they would override the --bandwidth-* flags", bandwidth.Name, pc.Args)
		}
	}
	if err := checkBinder([]config.KubeSchedulerProfile{got}); err != nil {
		t.Error(err)
	}
	if cfg.LeaderElection.ResourceName != bareLeaseName || !cfg.LeaderElection.LeaderElect {
		t.Errorf("the bare configuration elects a leader %v on lease %q, want true on %q",
			cfg.LeaderElection.LeaderElect, cfg.LeaderElection.ResourceName, bareLeaseName)
	}
	// kube-scheduler's other defaults still apply.
	if cfg.PercentageOfNodesToScore == nil || *cfg.PercentageOfNodesToScore != *before.PercentageOfNodesToScore ||
		cfg.ClientConnection.QPS != before.ClientConnection.QPS {
		t.Errorf("the bare configuration lost kube-scheduler's defaults: %+v", cfg)
	}
}
