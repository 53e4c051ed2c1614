package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"sextant.io/sextant/internal/charttest"
)

// TestChartMetrics: every component has a metrics Service; with the values on, each a
// ServiceMonitor (the ranker's and the agent's with a token over HTTPS) and the PrometheusRule carries
// every alert of charts/sextant/alerts; with them off (the default), neither.
func TestChartMetrics(t *testing.T) {
	off := charttest.Objects(t, charttest.Render(t, nil))
	for key := range off {
		if strings.HasPrefix(key, "ServiceMonitor/") || strings.HasPrefix(key, "PrometheusRule/") {
			t.Errorf("%s rendered with the default values", key)
		}
	}
	on := charttest.Objects(t, charttest.Render(t, map[string]any{
		"serviceMonitor": map[string]any{"enabled": true},
		"prometheusRule": map[string]any{"enabled": true},
	}))
	for _, c := range []string{"agent", "ranker", "webhook", "virtual-node-controller"} {
		if on["Service/sextant-"+c+"-metrics"] == nil {
			t.Errorf("no Service sextant-%s-metrics", c)
		}
		if on["ServiceMonitor/sextant-"+c] == nil {
			t.Errorf("no ServiceMonitor sextant-%s", c)
		}
	}
	// Each ServiceMonitor selects its metrics Service and no other (the webhook's serving
	// Service has the webhook's labels too, and no metrics port).
	for key, sm := range on {
		name, ok := strings.CutPrefix(key, "ServiceMonitor/")
		if !ok {
			continue
		}
		sel, _ := sm["spec"].(map[string]any)["selector"].(map[string]any)["matchLabels"].(map[string]any)
		var matched []string
		for skey, svc := range on {
			if !strings.HasPrefix(skey, "Service/") {
				continue
			}
			labels, _ := svc["metadata"].(map[string]any)["labels"].(map[string]any)
			match := len(sel) > 0
			for k, v := range sel {
				if labels[k] != v {
					match = false
				}
			}
			if match {
				matched = append(matched, skey)
			}
		}
		if want := "Service/" + name + "-metrics"; len(matched) != 1 || matched[0] != want {
			t.Errorf("%s selects %v, want only %s", key, matched, want)
		}
	}
	for _, c := range []string{"ranker", "agent"} {
		if sm := on["ServiceMonitor/sextant-"+c]; sm != nil {
			ep := sm["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
			if ep["scheme"] != "https" || ep["bearerTokenFile"] == nil || ep["port"] != "https-metrics" {
				t.Errorf("%s's ServiceMonitor endpoint %v: want https-metrics over https with the pod's token", c, ep)
			}
		}
	}
	// The agent's probes follow its port onto HTTPS.
	agent := on["DaemonSet/sextant-agent"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		get, _ := agent[probe].(map[string]any)["httpGet"].(map[string]any)
		if get["scheme"] != "HTTPS" || get["port"] != "https-metrics" {
			t.Errorf("the agent's %s %v: want HTTPS on https-metrics", probe, get)
		}
	}
	// The ClusterRole scrapers need comes with either component that requires it.
	agentOnly := charttest.Objects(t, charttest.Render(t, map[string]any{"ranker": map[string]any{"enabled": false}}))
	if agentOnly["ClusterRole/sextant-metrics-reader"] == nil {
		t.Error("no ClusterRole sextant-metrics-reader with the agent alone")
	}
	role := on["ClusterRole/sextant-metrics-reader"]
	if role == nil || !strings.Contains(mustYAML(t, role["rules"]), "/metrics") {
		t.Errorf("ClusterRole sextant-metrics-reader %v: want get on nonResourceURLs /metrics", role)
	}
	for _, key := range []string{"Deployment/sextant-webhook", "Deployment/sextant-virtual-node-controller"} {
		if !strings.Contains(mustYAML(t, on[key]), "--metrics-addr=:9465") {
			t.Errorf("%s does not serve metrics on :9465", key)
		}
	}
	if !strings.Contains(mustYAML(t, on["NetworkPolicy/sextant-webhook"]), "port: 9465") {
		t.Error("the webhook's NetworkPolicy does not let Prometheus reach port 9465")
	}

	file, err := os.ReadFile(filepath.Join("..", "..", "..", "charts", "sextant", "alerts", "sextant.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(file, &want); err != nil {
		t.Fatal(err)
	}
	rule := on["PrometheusRule/sextant"]
	if rule == nil {
		t.Fatal("no PrometheusRule with prometheusRule.enabled")
	}
	if got, w := mustYAML(t, rule["spec"]), mustYAML(t, want); got != w {
		t.Errorf("the PrometheusRule's spec differs from alerts/sextant.rules.yaml:\n%s\nwant\n%s", got, w)
	}
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
