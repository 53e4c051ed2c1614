package main

import (
	"fmt"

	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"
	"sigs.k8s.io/yaml"

	"sextant.io/sextant/ranker/profile"
)

// bareLeaseName is the leader-election lease of a ranker run without --config (unless
// --leader-elect-resource-name names another): kube-scheduler's own "kube-scheduler"
// lease would make the ranker wait for the cluster's scheduler, or the other way round.
const bareLeaseName = "sextant-ranker"

// serveSextantProfileByDefault makes the configuration kube-scheduler builds without
// --config one with the sextant profile (profile.SchedulerName, every sextant plugin as
// the chart enables them, no pluginConfig, so the --bandwidth-* flags are
// BandwidthAware's args) instead of default-scheduler, and the lease bareLeaseName.
// kube-scheduler has no option for it: app.Setup starts from latest.Default(), which is
// the scheme's defaulting of an empty configuration, so the defaulting function of
// KubeSchedulerConfiguration in that scheme is replaced by one that fills those in and
// then applies kube-scheduler's. Configurations loaded from a file are defaulted the same
// way, so call it only when there is no --config.
func serveSextantProfileByDefault() error {
	var bare configv1.KubeSchedulerConfiguration
	text := "profiles:\n- schedulerName: " + profile.SchedulerName + "\n" + profile.Plugins
	if err := yaml.UnmarshalStrict([]byte(text), &bare); err != nil {
		return fmt.Errorf("decode the sextant profile (profile.Plugins): %w", err)
	}
	scheme.Scheme.AddTypeDefaultingFunc(&configv1.KubeSchedulerConfiguration{}, func(obj any) {
		cfg := obj.(*configv1.KubeSchedulerConfiguration)
		if len(cfg.Profiles) == 0 {
			cfg.Profiles = []configv1.KubeSchedulerProfile{*bare.Profiles[0].DeepCopy()}
		}
		if cfg.LeaderElection.ResourceName == "" {
			cfg.LeaderElection.ResourceName = bareLeaseName
		}
		schedv1.SetObjectDefaults_KubeSchedulerConfiguration(cfg)
	})
	return nil
}
