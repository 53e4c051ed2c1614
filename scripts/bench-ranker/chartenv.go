package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// chartRankerGCEnv renders the chart in dir with its default values and returns the Go
// GC environment (GOGC, GOMEMLIMIT) of its ranker container as NAME=VALUE, so that
// sextant-ranker runs in the bench as the chart deploys it.
func chartRankerGCEnv(dir string) ([]string, error) {
	chart, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load the chart: %w", err)
	}
	values, err := chartutil.ToRenderValues(chart, nil, chartutil.ReleaseOptions{Name: "sextant", Namespace: "sextant-system"}, nil)
	if err != nil {
		return nil, fmt.Errorf("the chart's values: %w", err)
	}
	rendered, err := engine.Render(chart, values)
	if err != nil {
		return nil, fmt.Errorf("render the chart: %w", err)
	}
	name := filepath.Join(chart.Name(), "templates", "ranker-deployment.yaml")
	var dep appsv1.Deployment
	if err := yaml.Unmarshal([]byte(rendered[name]), &dep); err != nil {
		return nil, fmt.Errorf("the chart's %s: %w", name, err)
	}
	var env []string
	for _, c := range dep.Spec.Template.Spec.Containers {
		if c.Name != "ranker" {
			continue
		}
		for _, e := range c.Env {
			if e.Name == "GOGC" || e.Name == "GOMEMLIMIT" {
				env = append(env, e.Name+"="+e.Value)
			}
		}
	}
	if len(env) == 0 {
		return nil, fmt.Errorf("the chart's %s sets neither GOGC nor GOMEMLIMIT for the ranker", name)
	}
	return env, nil
}

// parseEnv parses a comma-separated NAME=VALUE list (--ranker-env).
func parseEnv(list string) ([]string, error) {
	var env []string
	for _, kv := range strings.Split(list, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			return nil, fmt.Errorf("--ranker-env %q: want NAME=VALUE[,NAME=VALUE...], e.g. GOGC=200", list)
		}
		env = append(env, kv)
	}
	return env, nil
}
