package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

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

	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/bandwidth"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/devices"
	"sextant.io/sextant/ranker/plugins/numa"
	"sextant.io/sextant/ranker/profile"

	"sextant.io/sextant/internal/charttest"
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
		{"image.repository of older charts", map[string]any{"image": map[string]any{"repository": "r.example/sextant"}}, "/image/repository"},
		{"digest without algorithm", map[string]any{"image": map[string]any{"ranker": map[string]any{"digest": "latest"}}}, "/image/ranker/digest"},
		{"unknown image field", map[string]any{"image": map[string]any{"agent": map[string]any{"name": "x"}}}, "/image/agent"},
		{"pull secret without name", map[string]any{"imagePullSecrets": []any{"regcred"}}, "/imagePullSecrets/0"},
		{"priority above the user range", map[string]any{"priorityClasses": map[string]any{"nodeCriticalValue": 2000000000}}, "/priorityClasses/nodeCriticalValue"},
		{"GOGC in extraEnv", map[string]any{"ranker": map[string]any{"extraEnv": []any{map[string]any{"name": "GOGC", "value": "400"}}}}, "/ranker/extraEnv/0"},
		{"GC percent 0", map[string]any{"ranker": map[string]any{"gc": map[string]any{"percent": 0}}}, "/ranker/gc/percent"},
		{"memory limit percent above 100", map[string]any{"ranker": map[string]any{"gc": map[string]any{"memoryLimitPercent": 120}}}, "/ranker/gc/memoryLimitPercent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := render(tc.overrides)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// The chart sets the ranker's Go GC through GOGC and GOMEMLIMIT, the latter a percentage
// of the container's memory limit in bytes; a limit it cannot read fails the install
// with a message naming it.
func TestChartRankerGCEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ranker   map[string]any
		gogc     string
		memLimit string // "" : no GOMEMLIMIT
	}{
		{"defaults: 90% of 1Gi", nil, "100", "966367641"},
		{"decimal suffix", map[string]any{"gc": map[string]any{"percent": 250, "memoryLimitPercent": 50}, "resources": map[string]any{"limits": map[string]any{"memory": "3G"}}}, "250", "1500000000"},
		{"bytes", map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1000"}}}, "100", "900"},
		{"no limit", map[string]any{"resources": map[string]any{"limits": nil}}, "100", ""},
		{"percent 0", map[string]any{"gc": map[string]any{"memoryLimitPercent": 0}}, "100", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var overrides map[string]any
			if tc.ranker != nil {
				overrides = map[string]any{"ranker": tc.ranker}
			}
			var dep struct {
				Spec struct{ Template struct{ Spec corev1.PodSpec } }
			}
			if err := yaml.Unmarshal([]byte(charttest.Render(t, overrides)["sextant/templates/ranker-deployment.yaml"]), &dep); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{}
			for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			if got := env["GOGC"]; got != tc.gogc {
				t.Errorf("GOGC = %q, want %q", got, tc.gogc)
			}
			if got, ok := env["GOMEMLIMIT"]; got != tc.memLimit || ok != (tc.memLimit != "") {
				t.Errorf("GOMEMLIMIT = %q (set: %v), want %q", got, ok, tc.memLimit)
			}
		})
	}
	_, err := charttest.TryRender(t, map[string]any{"ranker": map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1.5Gi"}}}})
	if err == nil || !strings.Contains(err.Error(), `ranker.resources.limits.memory "1.5Gi"`) || !strings.Contains(err.Error(), "1500Mi") {
		t.Errorf("limits.memory 1.5Gi: error %v, want one naming the value and the accepted form", err)
	}
}

// Every pod the chart runs takes its image from the image values (per component, by
// digest where one is set), the pull secrets, and a priority class that exists: the
// chart's own unless one is named.
func TestChartImagesPullSecretsAndPriority(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	rendered := charttest.Render(t, map[string]any{
		"image": map[string]any{
			"registry": "r.example/team/",
			"tag":      "v9",
			"ranker":   map[string]any{"digest": digest},
			"sidecars": map[string]any{"tag": "v7"},
			"agent":    map[string]any{"registry": "mirror.example", "tag": "v8"},
		},
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}, map[string]any{"name": "mirror"}},
		"ranker":           map[string]any{"priorityClassName": "mine"},
	})
	wantImage := map[string]string{
		"agent":      "mirror.example/sextant-agent:v8",
		"ranker":     "r.example/team/sextant-ranker@" + digest,
		"webhook":    "r.example/team/sextant-sidecars:v7",
		"controller": "r.example/team/sextant-sidecars:v7",
	}
	wantPriority := map[string]string{"agent": "sextant-node-critical", "ranker": "mine", "webhook": "sextant-cluster-critical", "controller": "sextant-cluster-critical"}
	seen := 0
	for name, text := range rendered {
		for _, doc := range strings.Split(text, "\n---") {
			var obj struct {
				Kind string
				Spec struct {
					Template struct{ Spec corev1.PodSpec }
				}
			}
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil || (obj.Kind != "Deployment" && obj.Kind != "DaemonSet") {
				continue
			}
			pod := obj.Spec.Template.Spec
			c := pod.Containers[0]
			seen++
			if want, ok := wantImage[c.Name]; !ok || c.Image != want {
				t.Errorf("%s: container %s runs %s, want %q", name, c.Name, c.Image, want)
			}
			if pod.PriorityClassName != wantPriority[c.Name] {
				t.Errorf("%s: priority class %q, want %q", name, pod.PriorityClassName, wantPriority[c.Name])
			}
			if len(pod.ImagePullSecrets) != 2 || pod.ImagePullSecrets[0].Name != "regcred" || pod.ImagePullSecrets[1].Name != "mirror" {
				t.Errorf("%s: imagePullSecrets %v, want regcred, mirror", name, pod.ImagePullSecrets)
			}
			args := strings.Join(c.Args, " ")
			if c.Name == "webhook" && (!strings.Contains(args, "--image-pull-secrets=regcred,mirror") ||
				!strings.Contains(args, "--wrapper-image=r.example/team/sextant-sidecar-wrapper:v9")) {
				t.Errorf("the webhook's args %s: want the pull secrets and the wrapper image", args)
			}
			if c.Name == "controller" && !strings.Contains(args, "--exit-image=r.example/team/exit0:v9") {
				t.Errorf("the controller's args %s: want the exit image", args)
			}
		}
	}
	if seen != len(wantImage) {
		t.Errorf("found %d Deployments and DaemonSets, want %d", seen, len(wantImage))
	}
	if !strings.Contains(rendered["sextant/templates/priorityclasses.yaml"], "name: sextant-cluster-critical") {
		t.Error("the chart does not create its PriorityClasses")
	}
	// Without the chart's classes, components without a named class have none.
	rendered = charttest.Render(t, map[string]any{"priorityClasses": map[string]any{"create": false}})
	if strings.Contains(rendered["sextant/templates/agent-daemonset.yaml"], "priorityClassName") ||
		strings.TrimSpace(rendered["sextant/templates/priorityclasses.yaml"]) != "" {
		t.Error("priorityClasses.create=false: the chart still creates or uses its PriorityClasses")
	}
}

// The chart renders the same manifests every time (Argo CD renders with helm template,
// without a cluster to look anything up in): with builtin TLS the webhook makes its own
// certificate, so nothing random is rendered. With cert-manager, a Certificate writes the
// Secret the webhook mounts and the CA injector fills the caBundles; the webhook then has
// no token.
func TestChartWebhookTLS(t *testing.T) {
	first, second := charttest.Render(t, nil), charttest.Render(t, nil)
	if !reflect.DeepEqual(first, second) {
		for name := range first {
			if first[name] != second[name] {
				t.Errorf("%s differs between two renders", name)
			}
		}
	}
	admission := first["sextant/templates/webhook-admission.yaml"]
	if strings.Contains(admission, "caBundle:") || strings.Contains(admission, "tls.crt:") {
		t.Errorf("builtin TLS renders a certificate or caBundle:\n%s", admission)
	}
	if !strings.Contains(first["sextant/templates/webhook-deployment.yaml"], "--cert-secret=sextant-webhook-cert") {
		t.Error("builtin TLS: the webhook does not keep its certificate in sextant-webhook-cert")
	}
	cm := charttest.Render(t, map[string]any{"webhook": map[string]any{"tls": map[string]any{"mode": "certManager"}}})
	admission = cm["sextant/templates/webhook-admission.yaml"]
	for _, want := range []string{"kind: Certificate", "secretName: sextant-webhook-cert", "kind: Issuer", "selfSigned: {}",
		"cert-manager.io/inject-ca-from: sextant-system/sextant-webhook"} {
		if !strings.Contains(admission, want) {
			t.Errorf("certManager TLS: no %q in\n%s", want, admission)
		}
	}
	if strings.Count(admission, "cert-manager.io/inject-ca-from") != 2 {
		t.Error("certManager TLS: not both webhook configurations get cert-manager's CA")
	}
	deploy := cm["sextant/templates/webhook-deployment.yaml"]
	if !strings.Contains(deploy, "automountServiceAccountToken: true") || strings.Contains(deploy, "--cert-secret") ||
		!strings.Contains(deploy, "secretName: sextant-webhook-cert") || !strings.Contains(deploy, "--bandwidth-quota=true") {
		t.Errorf("certManager TLS with the quota check: the webhook should mount the Secret and a token, and check quotas:\n%s", deploy)
	}
	if rbac := cm["sextant/templates/webhook-rbac.yaml"]; strings.Contains(rbac, "kind: Role") || !strings.Contains(rbac, "name: sextant-webhook-quota") {
		t.Errorf("certManager TLS: the webhook should get only the quota check's cluster role:\n%s", rbac)
	}
	noQuota := charttest.Render(t, map[string]any{"webhook": map[string]any{"bandwidthQuota": false, "tls": map[string]any{"mode": "certManager"}}})
	deploy = noQuota["sextant/templates/webhook-deployment.yaml"]
	if !strings.Contains(deploy, "automountServiceAccountToken: false") || !strings.Contains(deploy, "--bandwidth-quota=false") {
		t.Errorf("certManager TLS without the quota check: the webhook should have no token:\n%s", deploy)
	}
	if rbac := noQuota["sextant/templates/webhook-rbac.yaml"]; strings.Contains(rbac, "kind: Role") || strings.Contains(rbac, "kind: ClusterRole") {
		t.Errorf("certManager TLS without the quota check: the webhook still gets a role:\n%s", rbac)
	}
	issuer := charttest.Render(t, map[string]any{"webhook": map[string]any{"tls": map[string]any{"mode": "certManager",
		"certManager": map[string]any{"issuerRef": map[string]any{"kind": "ClusterIssuer", "name": "corp-ca"}}}}})
	if a := issuer["sextant/templates/webhook-admission.yaml"]; strings.Contains(a, "kind: Issuer") || !strings.Contains(a, "name: corp-ca") {
		t.Errorf("certManager TLS with an issuerRef:\n%s", a)
	}
}

// The ranker serves /livez only once its plugins are built, which waits up to
// heartbeat.SyncTimeout for the heartbeat caches: the chart's startup probe must allow
// longer, or the kubelet kills a ranker that starts while the API server is slow.
func TestChartRankerStartupProbeOutlastsTheSync(t *testing.T) {
	objs := charttest.Objects(t, charttest.Render(t, nil))
	var ranker map[string]any
	for _, c := range charttest.Containers(objs["Deployment/sextant-ranker"]) {
		if c["name"] == "ranker" {
			ranker = c
		}
	}
	if ranker == nil {
		t.Fatal("no ranker container in Deployment/sextant-ranker")
	}
	probe, _ := ranker["startupProbe"].(map[string]any)
	period, _ := probe["periodSeconds"].(float64)
	failures, _ := probe["failureThreshold"].(float64)
	budget := time.Duration(period*failures) * time.Second
	if budget <= heartbeat.SyncTimeout {
		t.Errorf("the ranker's startup probe allows %s (%v), want more than heartbeat.SyncTimeout %s", budget, probe, heartbeat.SyncTimeout)
	}
	if live, _ := ranker["livenessProbe"].(map[string]any); live["initialDelaySeconds"] != nil {
		t.Errorf("the liveness probe waits %v before its first check; the startup probe covers the start", live["initialDelaySeconds"])
	}
}

// The ranker's secure port (kube-scheduler's) serves HTTP/1.1 only, as sextant's own
// servers do (docs/security.md, "Bounded servers"); its args are kube-scheduler's.
func TestChartRankerSecurePortIsHTTP1(t *testing.T) {
	objs := charttest.Objects(t, charttest.Render(t, nil))
	for _, c := range charttest.Containers(objs["Deployment/sextant-ranker"]) {
		if c["name"] != "ranker" {
			continue
		}
		cmd := newSchedulerCommand()
		if err := cmd.ParseFlags(charttest.Strings(c["args"])); err != nil {
			t.Fatalf("the ranker does not take the chart's args: %v", err)
		}
		if f := cmd.Flags().Lookup("disable-http2-serving"); f == nil || f.Value.String() != "true" {
			t.Errorf("--disable-http2-serving = %v, want true", f)
		}
		return
	}
	t.Fatal("no ranker container in Deployment/sextant-ranker")
}
