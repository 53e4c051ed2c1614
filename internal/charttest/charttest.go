// Package charttest renders the Helm chart in tests, as `helm template` would, so that
// each binary's tests can check what the chart gives it against what it does.
package charttest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Render renders charts/sextant with overrides on its default values, as the release
// "sextant" in sextant-system; it fails the test if the chart does not render.
func Render(t testing.TB, overrides map[string]any) map[string]string {
	t.Helper()
	rendered, err := TryRender(t, overrides)
	if err != nil {
		t.Fatal(err)
	}
	return rendered
}

// TryRender is Render for tests that expect some values to fail: it returns the
// template error, file name by rendered file.
func TryRender(t testing.TB, overrides map[string]any) (map[string]string, error) {
	t.Helper()
	chart, err := loader.Load(filepath.Join(moduleRoot(t), "charts", "sextant"))
	if err != nil {
		t.Fatal(err)
	}
	values, err := chartutil.ToRenderValues(chart, overrides, chartutil.ReleaseOptions{Name: "sextant", Namespace: "sextant-system"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return engine.Render(chart, values)
}

// Objects decodes the rendered manifests into objects keyed by "Kind/name"; of
// namespaced objects of one kind and name in two namespaces, one is kept (List has
// both).
func Objects(t testing.TB, rendered map[string]string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, obj := range List(t, rendered) {
		meta, _ := obj["metadata"].(map[string]any)
		kind, _ := obj["kind"].(string)
		name, _ := meta["name"].(string)
		out[kind+"/"+name] = obj
	}
	return out
}

// List decodes the rendered manifests into objects.
func List(t testing.TB, rendered map[string]string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for file, text := range rendered {
		if !strings.HasSuffix(file, ".yaml") {
			continue
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if obj != nil {
				out = append(out, obj)
			}
		}
	}
	return out
}

// Containers returns the init containers and containers of a rendered Pod, or of a
// workload's pod template.
func Containers(obj map[string]any) []map[string]any {
	spec, _ := obj["spec"].(map[string]any)
	if tmpl, ok := spec["template"].(map[string]any); ok {
		spec, _ = tmpl["spec"].(map[string]any)
	}
	var out []map[string]any
	for _, key := range []string{"initContainers", "containers"} {
		list, _ := spec[key].([]any)
		for _, c := range list {
			if c, ok := c.(map[string]any); ok {
				out = append(out, c)
			}
		}
	}
	return out
}

// Strings returns a rendered list (a container's args, say) as strings.
func Strings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, s := range list {
		out = append(out, fmt.Sprint(s))
	}
	return out
}

// moduleRoot is the directory of go.mod above the test's working directory (its
// package's directory).
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// Values builds nested overrides from dotted paths and values:
// Values("agent.window", "30s", "ranker.replicas", 1).
func Values(kv ...any) map[string]any {
	out := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		keys := strings.Split(kv[i].(string), ".")
		m := out
		for _, k := range keys[:len(keys)-1] {
			next, ok := m[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
		m[keys[len(keys)-1]] = kv[i+1]
	}
	return out
}
