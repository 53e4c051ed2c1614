package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	"sextant.io/sextant/internal/charttest"
)

// schemaErr is helm's check of the values against values.schema.json (nil: accepted).
func schemaErr(t *testing.T, overrides map[string]any) error {
	t.Helper()
	ch, err := loader.Load(filepath.Join("..", "..", "..", "charts", "sextant"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = chartutil.ToRenderValues(ch, overrides, chartutil.ReleaseOptions{Name: "sextant", Namespace: "sextant-system"}, nil)
	return err
}

// wantRenderError renders with overrides and wants the install refused with an error
// containing every one of want.
func wantRenderError(t *testing.T, overrides map[string]any, want ...string) {
	t.Helper()
	_, err := charttest.TryRender(t, overrides)
	if err == nil {
		t.Errorf("values %v render, want an error naming %q", overrides, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("values %v: error %q, want it to name %q", overrides, err, w)
		}
	}
}

// Two ranker replicas without leader election would be two active schedulers, each
// reserving bandwidth, NUMA nodes and devices without seeing the other's reservations.
// Without leader election the ranker needs no lease, so no role on leases.
func TestChartRankerLeaderElection(t *testing.T) {
	wantRenderError(t, charttest.Values("ranker.leaderElection.enabled", false, "ranker.replicas", 2),
		"ranker.replicas", "ranker.leaderElection.enabled")
	one := charttest.Objects(t, charttest.Render(t, charttest.Values("ranker.leaderElection.enabled", false, "ranker.replicas", 1)))
	for _, key := range []string{"Role/sextant-ranker-leader-election", "RoleBinding/sextant-ranker-leader-election"} {
		if one[key] != nil {
			t.Errorf("ranker.leaderElection.enabled=false: %s rendered", key)
		}
	}
	if one["Deployment/sextant-ranker"] == nil {
		t.Error("ranker.leaderElection.enabled=false, ranker.replicas=1: no ranker Deployment")
	}
	def := charttest.Objects(t, charttest.Render(t, nil))
	for _, key := range []string{"Role/sextant-ranker-leader-election", "RoleBinding/sextant-ranker-leader-election"} {
		if def[key] == nil {
			t.Errorf("default values: no %s", key)
		}
	}
}

// agent.nicCapacities takes what the agent's --nic-capacity takes (agent/bandwidth
// ParseCapacities: IF=RATE or IF=ingress:RATE,egress:RATE, RATE a resource.Quantity of
// 1 to 10^15 bits/s), and refuses what it refuses, but for the bounds: the pattern
// refuses the milli suffix and negative exponents, not every value below 1 or above
// 10^15.
func TestChartNICCapacitiesSchema(t *testing.T) {
	for _, tc := range []struct {
		value string
		ok    bool
	}{
		{"eth0=10G", true},
		{"eth0=10Gi", true},
		{"eth0=1.5G", true},
		{"eth0=.5G", true},
		{"eth0=2.", true},
		{"eth0=100000000", true},
		{"eth0=1e9", true},
		{"eth0=+10M", true},
		{"eth0=500m", false}, // milli: half a bit per second
		{"eth0=1e-3", false},
		{"ens1f0=25Ti", true},
		{" eth0 = 10G ", true},
		{"eth0=ingress:10G,egress:1G", true},
		{"eth0=egress:1Gi", true},
		{"eth0=ingress:10G", true},
		{"eth0= ingress: 10G , egress:1G ", true},
		{"eth0=ingress:1G,ingress:2G", true},
		{"veth*=1G", true},
		{"eth0=0", false},
		{"eth0=0.0G", false},
		{"eth0=-1G", false},
		{"eth0=10K", false},
		{"eth0=10Gb", false},
		{"eth0=", false},
		{"=10G", false},
		{" =10G", false},
		{"eth0", false},
		{"eth0=ingress:10G,", false},
		{"eth0=ingress:10G,1G", false},
		{"eth0=up:10G", false},
		{"eth0=ingress :10G", false},
		{"eth0=ingress:0", false},
		{"eth0=ingress:", false},
		{"eth0=10G=1G", false},
	} {
		err := schemaErr(t, charttest.Values("agent.nicCapacities", []any{tc.value}))
		if tc.ok && err != nil {
			t.Errorf("agent.nicCapacities %q refused: %v", tc.value, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "/agent/nicCapacities/0")) {
			t.Errorf("agent.nicCapacities %q: got %v, want it refused", tc.value, err)
		}
	}
}

// The schema refuses values the binaries refuse at startup: a report threshold of 0 or
// 1, and zero durations where the agent or the ranker wants positive ones.
func TestChartValuesSchemaRanges(t *testing.T) {
	// NUMA pinning writes cpusets under the kubepods cgroup: it stays inside the hierarchy.
	for _, v := range []string{"..", "../../etc", "kubepods/../x"} {
		if err := schemaErr(t, charttest.Values("agent.numaPinning.kubepodsCgroup", v)); err == nil || !strings.Contains(err.Error(), "/agent/numaPinning/kubepodsCgroup") {
			t.Errorf("agent.numaPinning.kubepodsCgroup %q: got %v, want it refused", v, err)
		}
	}
	for _, v := range []string{"kubepods.slice", "custom/kubepods", "a..b"} {
		if err := schemaErr(t, charttest.Values("agent.numaPinning.kubepodsCgroup", v)); err != nil {
			t.Errorf("agent.numaPinning.kubepodsCgroup %q refused: %v", v, err)
		}
	}
	for _, v := range []any{0, 1, 1.5, -0.1} {
		if err := schemaErr(t, charttest.Values("agent.reportThreshold", v)); err == nil || !strings.Contains(err.Error(), "/agent/reportThreshold") {
			t.Errorf("agent.reportThreshold %v: got %v, want it refused", v, err)
		}
	}
	if err := schemaErr(t, charttest.Values("agent.reportThreshold", 0.5)); err != nil {
		t.Errorf("agent.reportThreshold 0.5 refused: %v", err)
	}
	positive := []string{
		"ranker.bandwidth.staleAfter",
		"ranker.leaderElection.leaseDuration", "ranker.leaderElection.renewDeadline", "ranker.leaderElection.retryPeriod",
		"agent.sampleInterval", "agent.window", "agent.reportMinInterval", "agent.reportMaxInterval",
		"agent.topologyInterval", "agent.topologyResync", "agent.numaPinning.resync",
		"agent.devices.auditInterval", "sidecar.resync",
	}
	for _, path := range positive {
		for _, zero := range []string{"0s", "0m0s", "0.0s", "00ms", "0h0m0.000s"} {
			err := schemaErr(t, charttest.Values(path, zero))
			if want := "/" + strings.ReplaceAll(path, ".", "/"); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s %q: got %v, want it refused", path, zero, err)
			}
		}
		for _, ok := range []string{"1s", "0.5s", "1m0s", "0h0m1s", "10ms", "1h30m"} {
			if err := schemaErr(t, charttest.Values(path, ok)); err != nil {
				t.Errorf("%s %q refused: %v", path, ok, err)
			}
		}
	}
}

// sextant.durationSeconds reads Go durations as the binaries do, for the chart's
// comparisons between them.
func TestChartDurationSeconds(t *testing.T) {
	ch, err := loader.Load(filepath.Join("..", "..", "..", "charts", "sextant"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]float64{
		"1m30s": 90, "500ms": 0.5, "2h": 7200, "1.5h": 5400, "1h2m3.5s": 3723.5, "10us": 1e-5, "10µs": 1e-5,
		"250ns": 2.5e-7, "0s": 0, "30000ms": 30, "1m0.5s": 60.5, "0.25m": 15,
	}
	var in []string
	for d := range cases {
		in = append(in, d)
	}
	slices.Sort(in)
	ch.Templates = append(ch.Templates, &chart.File{Name: "templates/durations.txt",
		Data: []byte(`{{ range .Values.durations }}{{ include "sextant.durationSeconds" . }}{{ "\n" }}{{ end }}`)})
	values, err := chartutil.ToRenderValues(ch, map[string]any{"durations": in}, chartutil.ReleaseOptions{Name: "sextant", Namespace: "sextant-system"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := engine.Render(ch, values)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(rendered["sextant/templates/durations.txt"])
	if len(got) != len(in) {
		t.Fatalf("durations %v: got %v", in, got)
	}
	for i, d := range in {
		secs, err := strconv.ParseFloat(got[i], 64)
		if err != nil || secs != cases[d] {
			t.Errorf("sextant.durationSeconds %q = %q, want %v", d, got[i], cases[d])
		}
	}
	ch.Templates[len(ch.Templates)-1].Data = []byte(`{{ include "sextant.durationSeconds" "a minute" }}`)
	if _, err := engine.Render(ch, values); err == nil || !strings.Contains(err.Error(), `"a minute"`) {
		t.Errorf("sextant.durationSeconds \"a minute\": error %v, want one naming it", err)
	}
}

// Durations the binaries refuse only together are refused at install, naming both.
func TestChartDurationPairs(t *testing.T) {
	wantRenderError(t, charttest.Values("agent.window", "500ms", "agent.sampleInterval", "1s"), "agent.window", "agent.sampleInterval")
	wantRenderError(t, charttest.Values("agent.reportMaxInterval", "1s", "agent.reportMinInterval", "2s"), "agent.reportMaxInterval", "agent.reportMinInterval")
	wantRenderError(t, charttest.Values("ranker.leaderElection.leaseDuration", "10s", "ranker.leaderElection.renewDeadline", "10s"),
		"ranker.leaderElection.leaseDuration", "ranker.leaderElection.renewDeadline")
	wantRenderError(t, charttest.Values("ranker.leaderElection.leaseDuration", "1m", "ranker.leaderElection.renewDeadline", "1m0.5s"),
		"ranker.leaderElection.leaseDuration", "ranker.leaderElection.renewDeadline")
	wantRenderError(t, charttest.Values("ranker.leaderElection.renewDeadline", "2s", "ranker.leaderElection.retryPeriod", "2s"),
		"ranker.leaderElection.renewDeadline", "ranker.leaderElection.retryPeriod")
	// A NodeBandwidth is rewritten at least every reportMaxInterval: a staleAfter not
	// above it lets quiet nodes go stale between two writes.
	wantRenderError(t, charttest.Values("ranker.bandwidth.staleAfter", "30s"), "ranker.bandwidth.staleAfter", "agent.reportMaxInterval")
	wantRenderError(t, charttest.Values("ranker.bandwidth.staleAfter", "1m", "agent.reportMaxInterval", "90s"), "ranker.bandwidth.staleAfter", "agent.reportMaxInterval")
	for _, ok := range []map[string]any{
		charttest.Values("agent.window", "1s", "agent.sampleInterval", "1000ms"),
		charttest.Values("agent.reportMaxInterval", "2s", "agent.reportMinInterval", "2s", "ranker.bandwidth.staleAfter", "3s"),
		charttest.Values("ranker.leaderElection.leaseDuration", "1m", "ranker.leaderElection.renewDeadline", "59.5s"),
		charttest.Values("ranker.bandwidth.staleAfter", "31s"),
		charttest.Values("ranker.bandwidth.staleAfter", "10s", "agent.enabled", false),
		charttest.Values("ranker.bandwidth.staleAfter", "10s", "ranker.enabled", false),
		charttest.Values("ranker.leaderElection.enabled", false, "ranker.replicas", 1, "ranker.leaderElection.leaseDuration", "1s"),
	} {
		if _, err := charttest.TryRender(t, ok); err != nil {
			t.Errorf("values %v refused: %v", ok, err)
		}
	}
}

// The webhook's NetworkPolicy lists each API server port once, and allows DNS when the
// API server is reached by name.
func TestChartWebhookNetworkPolicyEgress(t *testing.T) {
	for _, tc := range []struct {
		host  string
		port  any
		ports []string // TCP ports to the API server
		dns   bool
	}{
		{"", "", []string{"TCP/443", "TCP/6443"}, false},
		{"10.0.0.1", 6443, []string{"TCP/443", "TCP/6443"}, false},
		{"10.0.0.1", "6443", []string{"TCP/443", "TCP/6443"}, false},
		{"fd00::1", 8443, []string{"TCP/443", "TCP/6443", "TCP/8443"}, false},
		{"api.example.com", 443, []string{"TCP/443", "TCP/6443"}, true},
	} {
		objs := charttest.Objects(t, charttest.Render(t, charttest.Values("apiServer.host", tc.host, "apiServer.port", tc.port)))
		var np struct {
			Spec struct {
				Egress []struct {
					Ports []struct {
						Protocol string
						Port     any
					}
					To []any
				}
			}
		}
		if err := json.Unmarshal([]byte(mustJSON(t, objs["NetworkPolicy/sextant-webhook"])), &np); err != nil {
			t.Fatal(err)
		}
		var api, dns []string
		for _, rule := range np.Spec.Egress {
			for _, p := range rule.Ports {
				s := p.Protocol + "/" + strings.TrimSuffix(strings.TrimSuffix(mustJSON(t, p.Port), "\n"), ".0")
				if strings.HasSuffix(s, "/53") {
					dns = append(dns, s)
				} else {
					api = append(api, s)
				}
			}
		}
		slices.Sort(api)
		slices.Sort(dns)
		if !slices.Equal(api, tc.ports) {
			t.Errorf("apiServer %s:%v: egress to %v, want %v", tc.host, tc.port, api, tc.ports)
		}
		if wantDNS := []string{"TCP/53", "UDP/53"}; tc.dns != slices.Equal(dns, wantDNS) || (!tc.dns && len(dns) > 0) {
			t.Errorf("apiServer %s:%v: DNS egress %v, want it (%v): %v", tc.host, tc.port, dns, wantDNS, tc.dns)
		}
	}
}

// Dashboards and the helm test hint only for what is installed.
func TestChartDashboardsAndNotesFollowComponents(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		want   []string
		test   bool
	}{
		{nil, []string{"agent", "ranker", "sidecars"}, true},
		{charttest.Values("agent.enabled", false), []string{"ranker", "sidecars"}, false},
		{charttest.Values("ranker.enabled", false), []string{"agent", "sidecars"}, false},
		{charttest.Values("webhook.enabled", false), []string{"agent", "ranker", "sidecars"}, true},
		{charttest.Values("webhook.enabled", false, "sidecar.terminator", false), []string{"agent", "ranker"}, true},
		{charttest.Values("webhook.enabled", false, "agent.enabled", false), []string{"ranker"}, false},
	} {
		rendered := charttest.Render(t, tc.values)
		var got []string
		for key := range charttest.Objects(t, rendered) {
			if name, ok := strings.CutPrefix(key, "ConfigMap/sextant-dashboard-"); ok {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("values %v: dashboards %v, want %v", tc.values, got, tc.want)
		}
		checks := strings.TrimSpace(rendered["sextant/templates/tests/check.yaml"]) != ""
		notes := strings.Contains(rendered["sextant/templates/NOTES.txt"], "helm test")
		if checks != tc.test || notes != tc.test {
			t.Errorf("values %v: helm test pod rendered %v, NOTES name helm test %v, want %v", tc.values, checks, notes, tc.test)
		}
	}
}

// No webhook replica with failurePolicy Fail would refuse every pod; no controller
// replica means no controller, nor its account's rights on pods.
func TestChartWebhookReplicas(t *testing.T) {
	wantRenderError(t, charttest.Values("webhook.replicas", 0, "webhook.failurePolicy", "Fail"), "webhook.replicas", "webhook.failurePolicy")
	if _, err := charttest.TryRender(t, charttest.Values("webhook.replicas", 0)); err != nil {
		t.Errorf("webhook.replicas=0 with failurePolicy Ignore refused: %v", err)
	}
	controller := []string{
		"ServiceAccount/sextant-virtual-node-controller", "ClusterRole/sextant-virtual-node-controller",
		"ClusterRoleBinding/sextant-virtual-node-controller", "Role/sextant-virtual-node-controller-leader-election",
		"RoleBinding/sextant-virtual-node-controller-leader-election", "Deployment/sextant-virtual-node-controller",
		"ValidatingAdmissionPolicy/sextant-virtual-node-controller", "ValidatingAdmissionPolicyBinding/sextant-virtual-node-controller",
		"Service/sextant-virtual-node-controller-metrics",
	}
	on := charttest.Objects(t, charttest.Render(t, nil))
	off := charttest.Objects(t, charttest.Render(t, charttest.Values("webhook.virtualNodeReplicas", 0)))
	for _, key := range controller {
		if on[key] == nil {
			t.Errorf("default values: no %s", key)
		}
		if off[key] != nil {
			t.Errorf("webhook.virtualNodeReplicas=0: %s rendered", key)
		}
	}
	// The pod policy lets no account swap a command then.
	policy := mustYAML(t, off["ValidatingAdmissionPolicy/sextant-pod-annotations"])
	if strings.Contains(policy, "sextant-virtual-node-controller") || !strings.Contains(policy, "expression: \"false\"") {
		t.Errorf("webhook.virtualNodeReplicas=0: the pod policy still lets the controller swap commands:\n%s", policy)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
