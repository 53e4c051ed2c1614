//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/sidecarrules"
)

// TestDashboardsReturnData runs a real Prometheus (Debian's package) that scrapes the
// chart's agent, ranker, webhook and virtual-node controller on the local cluster, as
// the chart's ServiceMonitors would, while a workload runs: a pod the ranker places, a
// pod it cannot place, a Job whose sidecar the agent stops, and a pod the validating
// webhook refuses. Every query of every panel of every shipped dashboard must then
// return data; the test names the panels whose queries never did. It also loads the
// chart's alerts and requires Prometheus to evaluate each without error.
func TestDashboardsReturnData(t *testing.T) {
	requireRoot(t)
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (scripts/deps.sh installs Debian's package)")
	}
	installCRDs(t)
	deployChart(t)
	// The demo veth has a known capacity (scripts/deploy.sh): the remaining and capacity
	// panels need one.
	demoNetUp(t)
	// The chart's agent meters the demo veth as the network "demo" (scripts/deploy.sh),
	// from its next rescan when the veth is younger than the agent; its reports are
	// partial until the new veth has been metered for a whole window (the chart's 60s).
	eventually(t, 3*time.Minute, func() (bool, string) {
		nbw, err := getNodeBandwidth(context.Background(), local.nodeName)
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, n := range nbw.Status.Networks {
			if n.Name == "demo" && n.Ingress.Capacity != nil && nbw.Status.Window != nil && nbw.Status.Window.Duration >= time.Minute {
				return true, ""
			}
			names = append(names, n.Name)
		}
		return false, fmt.Sprintf("the real node's NodeBandwidth has networks %v and window %v, not demo with a capacity over a full window", names, nbw.Status.Window)
	})
	ns := testNamespace(t)

	prom := startPrometheus(t, promBin, ns)
	runDashboardWorkload(t, ns)

	type query struct{ where, expr string }
	var queries []query
	paths, _ := filepath.Glob(filepath.Join(repoRoot(t), "charts", "sextant", "dashboards", "*.json"))
	if len(paths) == 0 {
		t.Fatal("no dashboards in charts/sextant/dashboards")
	}
	panels := 0
	for _, path := range paths {
		d := readDashboard(t, path)
		vars := prom.resolveVariables(t, filepath.Base(path), d)
		for _, p := range d.Panels {
			panels++
			for _, tg := range p.Targets {
				where := fmt.Sprintf("%s: panel %d %q query %s", filepath.Base(path), p.ID, p.Title, tg.RefID)
				expr := substituteVariables(tg.Expr, vars)
				queries = append(queries, query{where: where, expr: expr})
				// A standby excluded by "unless" on a series that never exists excludes
				// nothing: the series must be there.
				for _, m := range unlessStandby.FindAllStringSubmatch(expr, -1) {
					queries = append(queries, query{where: where + ", the series it excludes the standby by", expr: m[1]})
				}
			}
		}
	}
	// Each query is asked until it returns data or the deadline passes; the workload's
	// effects (a stopped sidecar, an unschedulable pod) take a scrape or two to show.
	deadline := time.Now().Add(3 * time.Minute)
	pending := queries
	for len(pending) > 0 && time.Now().Before(deadline) {
		var still []query
		for _, q := range pending {
			if n, err := prom.count(q.expr); err != nil || n == 0 {
				still = append(still, q)
			}
		}
		pending = still
		if len(pending) > 0 {
			time.Sleep(2 * time.Second)
		}
	}
	for _, q := range pending {
		_, err := prom.count(q.expr)
		t.Errorf("%s never returned data (err %v):\n  %s", q.where, err, q.expr)
	}
	t.Logf("%d dashboards, %d panels, %d queries: %d returned data", len(paths), panels, len(queries), len(queries)-len(pending))

	// The alerts: all loaded, and evaluated without error.
	rulesFile, err := os.ReadFile(filepath.Join(repoRoot(t), "charts", "sextant", "alerts", "sextant.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := strings.Count(string(rulesFile), "- alert: ")
	eventually(t, time.Minute, func() (bool, string) {
		rules, err := prom.rules()
		if err != nil {
			return false, err.Error()
		}
		var bad []string
		for name, health := range rules {
			if health != "ok" {
				bad = append(bad, name+"="+health)
			}
		}
		sort.Strings(bad)
		return len(rules) == alerts && len(bad) == 0, fmt.Sprintf("%d rules loaded (want %d), not ok: %v", len(rules), alerts, bad)
	})
	if t.Failed() {
		t.Logf("targets:\n%s", prom.targets())
	}
}

// unlessStandby finds a panel's exclusion of the ranker's standby replica: "unless on
// (instance) (SERIES == 0)".
var unlessStandby = regexp.MustCompile(`unless on \(instance\) \(([^()]*) == 0\)`)

// promDashboard is the part of a dashboard the test reads.
type promDashboard struct {
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			IncludeAll bool   `json:"includeAll"`
			AllValue   string `json:"allValue"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T, path string) promDashboard {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d promDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

var (
	templateVariable = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z0-9_]+)`)
	labelValues      = regexp.MustCompile(`^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)
)

// substituteVariables puts in the values Grafana would: the rate interval as four scrape
// intervals and more, each query variable's resolved value.
func substituteVariables(expr string, vars map[string]string) string {
	return templateVariable.ReplaceAllStringFunc(expr, func(m string) string {
		name := strings.Trim(m, "${}")
		name, _, _ = strings.Cut(name, ":")
		if name == "__rate_interval" || name == "__interval" || name == "__range" {
			return "1m"
		}
		if v, ok := vars[name]; ok {
			return v
		}
		return m // left as it is: the query fails to parse and the test names it
	})
}

// prometheus is the test's Prometheus server.
type prometheus struct {
	base string
}

// startPrometheus runs prometheus with a scrape configuration equivalent to the chart's
// ServiceMonitors: the endpoints of the chart's metrics Services, the agent's instance
// named after its node, the agent and the ranker over HTTPS with the token of a service
// account bound to the chart's ClusterRole sextant-metrics-reader.
func startPrometheus(t *testing.T, bin, ns string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	tok := metricsReaderToken(t, ns, "prometheus")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	checkRankerMetricsAuth(t, ns, tok)
	checkAgentMetricsAuth(t, ns, tok)
	// Debian's Prometheus is built without Kubernetes service discovery: the targets are
	// the ready endpoints of the chart's metrics Services, as the ServiceMonitors select
	// them, listed once (the release is deployed and ready).
	job := func(name, service, port string, nodeInstance bool) string {
		var targets []string
		eventually(t, time.Minute, func() (bool, string) {
			targets = serviceTargets(t, service, port, nodeInstance)
			return len(targets) > 0, fmt.Sprintf("service %s has no ready endpoint on port %s", service, port)
		})
		return fmt.Sprintf("- job_name: %s\n  static_configs:\n%s", name, strings.Join(targets, ""))
	}
	secure := fmt.Sprintf(`  scheme: https
  tls_config: {insecure_skip_verify: true}
  authorization: {credentials_file: %s}
`, tokenFile)
	config := "global: {scrape_interval: 2s, evaluation_interval: 2s}\n" +
		"rule_files: [" + filepath.Join(repoRoot(t), "charts", "sextant", "alerts", "sextant.rules.yaml") + "]\n" +
		"scrape_configs:\n" +
		job("sextant-agent", "sextant-agent-metrics", "https-metrics", true) + secure +
		job("sextant-ranker", "sextant-ranker-metrics", "https-metrics", false) + secure +
		job("sextant-webhook", "sextant-webhook-metrics", "metrics", false) +
		job("sextant-virtual-node-controller", "sextant-virtual-node-controller-metrics", "metrics", false)
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("promtool", "check", "config", configFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s\n%s", err, out, config)
	}
	// --log.level=info for the line that names the port the kernel picked.
	p := startProcess(t, bin, "--config.file="+configFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:0", "--log.level=info")
	addr := waitForAddress(t, p, regexp.MustCompile(`msg="Listening on" address=(\S+)`), 30*time.Second)
	prom := &prometheus{base: "http://" + addr}
	eventually(t, 30*time.Second, func() (bool, string) {
		resp, err := http.Get(prom.base + "/-/ready")
		if err != nil {
			return false, fmt.Sprintf("prometheus not ready: %v\n%s", err, lastLines(p.output(), 20))
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("prometheus /-/ready: HTTP %d", resp.StatusCode)
	})
	// Every job has at least one target up before the workload starts, so that its
	// counters' increases are seen.
	eventually(t, 90*time.Second, func() (bool, string) {
		up := map[string]bool{}
		for _, j := range []string{"sextant-agent", "sextant-ranker", "sextant-webhook", "sextant-virtual-node-controller"} {
			if n, _ := prom.count(fmt.Sprintf(`up{job=%q} == 1`, j)); n > 0 {
				up[j] = true
			}
		}
		return len(up) == 4, fmt.Sprintf("jobs with a target up: %v; targets:\n%s", up, prom.targets())
	})
	return prom
}

// metricsReaderToken is a token of a new service account name in ns, bound to the
// chart's ClusterRole sextant-metrics-reader.
func metricsReaderToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	sa, err := local.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crb, err := local.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-" + name + "-sextant-metrics-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "sextant-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = local.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	tok, err := local.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// checkRankerMetricsAuth asks a ranker's /metrics with the bound token (200), a token
// of an account without sextant-metrics-reader (403) and none (403: anonymous, which
// the authorizer refuses), as docs/operations.md says.
func checkRankerMetricsAuth(t *testing.T, ns, bound string) {
	t.Helper()
	ctx := context.Background()
	sa, err := local.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "unbound"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unbound, err := local.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	eventually(t, time.Minute, func() (bool, string) {
		targets := serviceTargets(t, "sextant-ranker-metrics", "https-metrics", false)
		if len(targets) == 0 {
			return false, "the ranker's metrics Service has no ready endpoint"
		}
		addr = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(targets[0]), `- targets: ["`), `"]`)
		return true, ""
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, c := range []struct {
		who, token string
		want       int
	}{{"bound account", bound, http.StatusOK}, {"account without the role", unbound.Status.Token, http.StatusForbidden}, {"no token (anonymous)", "", http.StatusForbidden}} {
		// The binding takes effect once the API server's authorizer has seen it.
		eventually(t, 30*time.Second, func() (bool, string) {
			req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := client.Do(req)
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == c.want, fmt.Sprintf("ranker /metrics with the %s: HTTP %d, want %d", c.who, resp.StatusCode, c.want)
		})
	}
}

// checkAgentMetricsAuth asks each agent's /metrics with the bound token (200), a token
// of an account without sextant-metrics-reader (403) and none (401: the agent knows no
// anonymous user), as docs/operations.md says; its probes' paths answer without one.
func checkAgentMetricsAuth(t *testing.T, ns, bound string) {
	t.Helper()
	ctx := context.Background()
	sa, err := local.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent-unbound"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unbound, err := local.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	eventually(t, time.Minute, func() (bool, string) {
		addrs = nil
		for _, target := range serviceTargets(t, "sextant-agent-metrics", "https-metrics", true) {
			_, rest, _ := strings.Cut(target, `- targets: ["`)
			addr, _, _ := strings.Cut(rest, `"]`)
			addrs = append(addrs, addr)
		}
		return len(addrs) > 0, "the agent's metrics Service has no ready endpoint on https-metrics"
	})
	for _, addr := range addrs {
		for _, c := range []struct {
			who, path, token string
			want             int
		}{
			{"bound account", "/metrics", bound, http.StatusOK},
			{"account without the role", "/metrics", unbound.Status.Token, http.StatusForbidden},
			{"no token", "/metrics", "", http.StatusUnauthorized},
			{"no token", "/healthz", "", http.StatusOK},
			{"no token", "/readyz", "", http.StatusOK},
		} {
			// The binding takes effect once the API server's authorizer has seen it.
			eventually(t, 30*time.Second, func() (bool, string) {
				code, body, err := agentGet(addr, c.path, c.token)
				return code == c.want, fmt.Sprintf("agent %s %s with the %s: HTTP %d, %v, want %d: %.200s", addr, c.path, c.who, code, err, c.want, body)
			})
		}
	}
}

// serviceTargets are static_configs entries for the ready endpoints of a Service of the
// release on the named port; with nodeInstance, instance is the node's name, as the
// agent's ServiceMonitor relabels it.
func serviceTargets(t *testing.T, service, port string, nodeInstance bool) []string {
	t.Helper()
	slices, err := local.kube.DiscoveryV1().EndpointSlices(releaseNamespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sl := range slices.Items {
		var number int32
		for _, p := range sl.Ports {
			if p.Name != nil && *p.Name == port && p.Port != nil {
				number = *p.Port
			}
		}
		if number == 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready == nil || !*ep.Conditions.Ready || len(ep.Addresses) == 0 {
				continue
			}
			target := fmt.Sprintf("  - targets: [%q]\n", net.JoinHostPort(ep.Addresses[0], fmt.Sprint(number)))
			if nodeInstance && ep.NodeName != nil {
				target += fmt.Sprintf("    labels: {instance: %q}\n", *ep.NodeName)
			}
			out = append(out, target)
		}
	}
	return out
}

func (p *prometheus) get(path string, params url.Values, out any) error {
	resp, err := http.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, body)
	}
	return json.Unmarshal(body, out)
}

// count is the number of series the instant query returns.
func (p *prometheus) count(expr string) (int, error) {
	var r struct {
		Data struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &r); err != nil {
		return 0, err
	}
	return len(r.Data.Result), nil
}

// resolveVariables gives each variable the value Grafana would by default: a query
// variable's allValue where it offers All, else the first of its label_values (which
// must return some).
func (p *prometheus) resolveVariables(t *testing.T, file string, d promDashboard) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("%s: variable %s: want label_values(selector, label), got %q", file, v.Name, v.Definition)
		}
		selector, label := substituteVariables(m[1], vars), m[2]
		var values []string
		eventually(t, 2*time.Minute, func() (bool, string) {
			var r struct {
				Data []string `json:"data"`
			}
			err := p.get("/api/v1/label/"+label+"/values", url.Values{"match[]": {selector}}, &r)
			values = r.Data
			return err == nil && len(values) > 0, fmt.Sprintf("%s: variable %s (%s) has no values: %v", file, v.Name, v.Definition, err)
		})
		sort.Strings(values)
		switch {
		case v.IncludeAll && v.AllValue != "":
			vars[v.Name] = v.AllValue
		default:
			vars[v.Name] = regexp.QuoteMeta(values[0])
		}
	}
	return vars
}

// rules is each rule's health by name.
func (p *prometheus) rules() (map[string]string, error) {
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name   string `json:"name"`
					Health string `json:"health"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/rules", url.Values{}, &r); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			out[rule.Name] = rule.Health
		}
	}
	return out, nil
}

// targets lists the scrape targets with their health and last error, for failures.
func (p *prometheus) targets() string {
	var r struct {
		Data struct {
			ActiveTargets []struct {
				ScrapeURL string            `json:"scrapeUrl"`
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/targets", url.Values{}, &r); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, tg := range r.Data.ActiveTargets {
		fmt.Fprintf(&b, "  %s %s %s %s\n", tg.Labels["job"], tg.ScrapeURL, tg.Health, tg.LastError)
	}
	return b.String()
}

// runDashboardWorkload makes what the panels count: the chart's ranker places a pod and
// keeps another unschedulable for want of bandwidth, the chart's webhook prepares a
// Job's sidecar and the chart's agent stops it, and the validating webhook refuses a
// pod with a malformed annotation.
func runDashboardWorkload(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	pod := func(name string, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
			Spec: corev1.PodSpec{
				SchedulerName:                 "sextant",
				NodeSelector:                  map[string]string{"sextant.io/local": "true"},
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "app", Image: busyboxImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sleep", "3600"}}},
			},
		}
	}
	for _, p := range []*corev1.Pod{
		pod("placed", map[string]string{"bandwidth.sextant.io/network": "demo", "bandwidth.sextant.io/ingress-required": "1M"}),
		pod("unplaceable", map[string]string{"bandwidth.sextant.io/network": "demo", "bandwidth.sextant.io/ingress-required": "100T"}),
	} {
		if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}
	bad := pod("malformed", map[string]string{"bandwidth.sextant.io/ingress-required": "lots"})
	if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, bad, metav1.CreateOptions{}); err == nil {
		t.Error("a pod with a malformed bandwidth annotation was admitted; want the chart's validating webhook to refuse it")
	}
	main := corev1.Container{Name: "main", Image: busyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", "sleep 2"}}
	side := corev1.Container{Name: "proxy", Image: busyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
		Env: []corev1.EnvVar{{Name: sidecarrules.EnvSidecar, Value: "true"}}}
	_, err := local.kube.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "with-sidecar", Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				NodeSelector:                  map[string]string{"sextant.io/local": "true"},
				TerminationGracePeriodSeconds: ptr.To[int64](10),
				Containers:                    []corev1.Container{main, side},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create job: %v", err)
	}
	waitScheduled(t, ns, "placed", time.Minute)
	waitFailedScheduling(t, ns, "unplaceable", time.Minute)
	eventually(t, 2*time.Minute, func() (bool, string) {
		j, err := local.kube.BatchV1().Jobs(ns).Get(ctx, "with-sidecar", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("job with-sidecar not complete: %+v", j.Status)
	})
}
