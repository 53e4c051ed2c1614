package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	"sigs.k8s.io/yaml"

	"sextant.io/sextant/ranker/plugins/bandwidth"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/devices"
	"sextant.io/sextant/ranker/plugins/numa"
	"sextant.io/sextant/ranker/profile"
)

// The chart's profile runs sextant's Filters before kube-scheduler's own: each costs a
// lookup per node and rejects nodes the default Filters pass, which then skip them. The
// order checked is the one kube-scheduler's framework builds from the chart's rendered
// configuration.
func TestChartProfileRunsSextantFiltersFirst(t *testing.T) {
	prof := chartProfile(t)
	schedmetrics.Register()
	registry := plugins.NewInTreeRegistry()
	// Stand-ins: the order depends only on the names and the extension points each
	// implements, and the real plugins would need an API server.
	stand := func(p fwk.Plugin) frameworkruntime.PluginFactory {
		return func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return p, nil }
	}
	for _, name := range []string{bandwidth.Name, numa.Name, devices.Name} {
		if err := registry.Register(name, stand(filterStandIn(name))); err != nil {
			t.Fatal(err)
		}
	}
	if err := registry.Register(binder.Name, stand(binderStandIn(binder.Name))); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	_, ctx := ktesting.NewTestContext(t)
	fw, err := frameworkruntime.NewFramework(ctx, registry, prof,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(client, 0)),
		frameworkruntime.WithSnapshotSharedLister(schedcache.NewEmptySnapshot()))
	if err != nil {
		t.Fatalf("the chart's profile: %v", err)
	}
	var filters []string
	for _, p := range fw.ListPlugins().Filter.Enabled {
		filters = append(filters, p.Name)
	}
	want := []string{bandwidth.Name, numa.Name, devices.Name}
	if len(filters) <= len(want) || !slices.Equal(filters[:len(want)], want) {
		t.Fatalf("the chart's profile runs Filters %v, want %v first and kube-scheduler's after them", filters, want)
	}
	if !slices.Contains(filters, "NodeResourcesFit") {
		t.Errorf("the chart's profile runs Filters %v, without kube-scheduler's NodeResourcesFit", filters)
	}
}

// chartProfile renders the chart with its default values and loads the ranker's
// KubeSchedulerConfiguration from it as kube-scheduler would (defaults applied).
func chartProfile(t *testing.T) *config.KubeSchedulerProfile {
	t.Helper()
	chart, err := loader.Load(filepath.Join("..", "..", "..", "charts", "sextant"))
	if err != nil {
		t.Fatal(err)
	}
	values, err := chartutil.ToRenderValues(chart, nil, chartutil.ReleaseOptions{Name: "sextant", Namespace: "sextant-system"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := engine.Render(chart, values)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal([]byte(rendered["sextant/templates/ranker-config.yaml"]), &cm); err != nil {
		t.Fatalf("the chart's ranker ConfigMap: %v", err)
	}
	return loadProfile(t, "the chart's", cm.Data["config.yaml"])
}

// loadProfile loads the only profile of a KubeSchedulerConfiguration as kube-scheduler
// would (defaults applied).
func loadProfile(t *testing.T, whose, text string) *config.KubeSchedulerProfile {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	logger, _ := ktesting.NewTestContext(t)
	cfg, err := options.LoadConfigFromFile(logger, path)
	if err != nil {
		t.Fatalf("%s KubeSchedulerConfiguration: %v", whose, err)
	}
	if len(cfg.Profiles) != 1 {
		t.Fatalf("%s configuration has %d profiles, want 1", whose, len(cfg.Profiles))
	}
	return &cfg.Profiles[0]
}

// The end-to-end tests and make bench-ranker write their own configurations with
// profile.Plugins: they test and measure what the chart deploys only while its plugins
// are the chart's.
func TestChartProfileMatches(t *testing.T) {
	chart := chartProfile(t)
	ours := loadProfile(t, "profile.Plugins'", "apiVersion: kubescheduler.config.k8s.io/v1\n"+
		"kind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: "+chart.SchedulerName+"\n"+profile.Plugins)
	if !reflect.DeepEqual(chart.Plugins, ours.Plugins) {
		want, _ := yaml.Marshal(chart.Plugins)
		got, _ := yaml.Marshal(ours.Plugins)
		t.Errorf("profile.Plugins enables, with defaults:\n%s\nthe chart's profile:\n%s", got, want)
	}
}

type filterStandIn string

func (p filterStandIn) Name() string { return string(p) }
func (filterStandIn) Filter(context.Context, fwk.CycleState, *corev1.Pod, fwk.NodeInfo) *fwk.Status {
	return nil
}

type binderStandIn string

func (p binderStandIn) Name() string { return string(p) }
func (binderStandIn) Bind(context.Context, fwk.CycleState, *corev1.Pod, string) *fwk.Status {
	return nil
}

// TestChartValuesSchema: values the ranker or the agent would refuse only at startup
// (a crash-looping pod after helm upgrade) are refused by helm, naming the value.
func TestChartValuesSchema(t *testing.T) {
	chart, err := loader.Load(filepath.Join("..", "..", "..", "charts", "sextant"))
	if err != nil {
		t.Fatal(err)
	}
	render := func(overrides map[string]any) error {
		_, err := chartutil.ToRenderValues(chart, overrides, chartutil.ReleaseOptions{Name: "sextant", Namespace: "sextant-system"}, nil)
		return err
	}
	bandwidth := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"ranker": map[string]any{"bandwidth": m}}
	}
	if err := render(nil); err != nil {
		t.Fatalf("the default values: %v", err)
	}
	if err := render(bandwidth("ingressWeight", 3, "egressWeight", 0, "scoreWeight", 5, "bestFitWindow", "strict", "strategy", "most-headroom")); err != nil {
		t.Errorf("valid bandwidth values refused: %v", err)
	}
	for _, tc := range []struct {
		name      string
		overrides map[string]any
		want      string
	}{
		{"fractional weight", bandwidth("ingressWeight", 1.5), "/ranker/bandwidth/ingressWeight"},
		{"negative weight", bandwidth("egressWeight", -1), "/ranker/bandwidth/egressWeight"},
		{"both weights zero", bandwidth("ingressWeight", 0, "egressWeight", 0), "/ranker/bandwidth"},
		{"unknown strategy", bandwidth("strategy", "cheapest"), "/ranker/bandwidth/strategy"},
		{"unknown best-fit window", bandwidth("bestFitWindow", "loose"), "/ranker/bandwidth/bestFitWindow"},
		{"score weight out of range", bandwidth("scoreWeight", 0), "/ranker/bandwidth/scoreWeight"},
		{"stale-after not a duration", bandwidth("staleAfter", "a minute"), "/ranker/bandwidth/staleAfter"},
		{"agent window not a duration", map[string]any{"agent": map[string]any{"window": "soon"}}, "/agent/window"},
		{"webhook failure policy", map[string]any{"webhook": map[string]any{"failurePolicy": "Sometimes"}}, "/webhook/failurePolicy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := render(tc.overrides)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
