// Package lint checks the chart's dashboards and alerts without a cluster: every query
// parses with Prometheus's own PromQL parser, panel IDs are unique within a dashboard,
// and every panel queries the dashboard's datasource variable. `make verify` runs it.
package lint

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

const chartDir = "../../charts/sextant"

// Dashboard is the part of a Grafana dashboard the checks read.
type Dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Panel is one panel and its queries.
type Panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// variable matches Grafana's $name, ${name} and ${name:format}.
var variable = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z0-9_]+)`)

// substitute replaces template variables with values that keep the query valid PromQL:
// durations for the interval variables, a regular expression for any other (they are
// used in =~ matchers).
func substitute(expr string) string {
	return variable.ReplaceAllStringFunc(expr, func(m string) string {
		name := strings.Trim(m, "${}")
		name, _, _ = strings.Cut(name, ":")
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "1m"
		case "__interval_ms", "__range_ms":
			return "60000"
		case "__range_s":
			return "60"
		default:
			return ".+"
		}
	})
}

func loadDashboards(t *testing.T) map[string]Dashboard {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(chartDir, "dashboards", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no dashboards in %s/dashboards (%v)", chartDir, err)
	}
	out := map[string]Dashboard{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var d Dashboard
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[filepath.Base(p)] = d
	}
	return out
}

func TestDashboards(t *testing.T) {
	uids := map[string]string{}
	for file, d := range loadDashboards(t) {
		if d.UID == "" || uids[d.UID] != "" {
			t.Errorf("%s: uid %q empty or also used by %s", file, d.UID, uids[d.UID])
		}
		uids[d.UID] = file
		for _, p := range problems(d) {
			t.Errorf("%s: %s", file, p)
		}
	}
}

// problems are what is wrong with one dashboard.
func problems(d Dashboard) []string {
	var out []string
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	if !vars["datasource"] {
		out = append(out, "no datasource variable")
	}
	if len(d.Panels) == 0 {
		out = append(out, "no panels")
	}
	ids := map[int]string{}
	for _, p := range d.Panels {
		if p.ID == 0 {
			out = append(out, fmt.Sprintf("panel %q has no id", p.Title))
		} else if other, dup := ids[p.ID]; dup {
			out = append(out, fmt.Sprintf("panels %q and %q share id %d", other, p.Title, p.ID))
		}
		ids[p.ID] = p.Title
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || p.Datasource.Type != "prometheus" {
			out = append(out, fmt.Sprintf("panel %q: datasource %+v, want {type: prometheus, uid: ${datasource}}", p.Title, p.Datasource))
		}
		if len(p.Targets) == 0 {
			out = append(out, fmt.Sprintf("panel %q queries nothing", p.Title))
		}
		for _, tg := range p.Targets {
			for _, m := range variable.FindAllStringSubmatch(tg.Expr, -1) {
				name := m[1] + m[2]
				if !strings.HasPrefix(name, "__") && !vars[name] {
					out = append(out, fmt.Sprintf("panel %q query %s uses $%s, which the dashboard does not define", p.Title, tg.RefID, name))
				}
			}
			if _, err := parser.ParseExpr(substitute(tg.Expr)); err != nil {
				out = append(out, fmt.Sprintf("panel %q query %s does not parse: %v: %s", p.Title, tg.RefID, err, tg.Expr))
			}
		}
	}
	return out
}

// TestProblemsFound: each kind of mistake is reported.
func TestProblemsFound(t *testing.T) {
	const good = `{"templating": {"list": [{"name": "datasource", "type": "datasource"}, {"name": "node", "type": "query"}]},
	  "panels": [{"id": 1, "title": "ok", "datasource": {"type": "prometheus", "uid": "${datasource}"},
	    "targets": [{"refId": "A", "expr": "sum(rate(x_total{instance=~\"$node\"}[$__rate_interval]))"}]}]}`
	var d Dashboard
	if err := json.Unmarshal([]byte(good), &d); err != nil {
		t.Fatal(err)
	}
	if p := problems(d); len(p) != 0 {
		t.Fatalf("a good dashboard: %v", p)
	}
	for name, c := range map[string]struct {
		change func(*Dashboard)
		want   string
	}{
		"bad query":         {func(d *Dashboard) { d.Panels[0].Targets[0].Expr = "sum(rate(x_total[5m])" }, "does not parse"},
		"undefined var":     {func(d *Dashboard) { d.Panels[0].Targets[0].Expr = `x{a=~"$nope"}` }, "does not define"},
		"fixed datasource":  {func(d *Dashboard) { d.Panels[0].Datasource.UID = "prom-1" }, "want {type: prometheus"},
		"duplicate id":      {func(d *Dashboard) { d.Panels = append(d.Panels, d.Panels[0]) }, "share id 1"},
		"no datasource var": {func(d *Dashboard) { d.Templating.List = d.Templating.List[1:] }, "no datasource variable"},
	} {
		var bad Dashboard
		_ = json.Unmarshal([]byte(good), &bad)
		c.change(&bad)
		if p := strings.Join(problems(bad), "; "); !strings.Contains(p, c.want) {
			t.Errorf("%s: problems %q, want one saying %q", name, p, c.want)
		}
	}
}

// TestAlerts parses every alert's expression; the PrometheusRule template embeds the
// file as it is.
func TestAlerts(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "alerts", "sextant.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &rules); err != nil {
		t.Fatalf("sextant.rules.yaml: %v", err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" {
				t.Errorf("group %s: a rule without an alert name", g.Name)
			}
			if _, err := parser.ParseExpr(r.Expr); err != nil {
				t.Errorf("alert %s: %v\n%s", r.Alert, err, r.Expr)
			}
		}
	}
	if n == 0 {
		t.Error("no alerts in sextant.rules.yaml")
	}
}
