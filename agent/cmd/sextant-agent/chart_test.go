package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sextant.io/sextant/cri"
	"sextant.io/sextant/internal/charttest"
)

// The chart grants the agent pods list/watch and events create/get exactly when the flags
// it renders make the agent act on pods: with any of the terminator, NUMA pinning and
// the device plugin on, and with none of them (least privilege); and nodes/status patch,
// with the policy that narrows it, exactly when the device plugin runs. The flags are
// parsed by the agent's own command, so a part that starts to act under another flag
// fails here until the chart grants it. The device filter reaches the agent whether or
// not the plugin runs: it marks devices excluded in NodeTopology.
func TestChartGrantsWhatTheAgentUses(t *testing.T) {
	for _, terminator := range []bool{false, true} {
		for _, pinning := range []bool{false, true} {
			for _, plugin := range []bool{false, true} {
				name := fmt.Sprintf("terminator=%v,numaPinning=%v,devices.plugin=%v", terminator, pinning, plugin)
				t.Run(name, func(t *testing.T) {
					objs := charttest.Objects(t, charttest.Render(t, map[string]any{
						"sidecar": map[string]any{"terminator": terminator},
						"agent": map[string]any{
							"numaPinning": map[string]any{"enabled": pinning},
							"devices":     map[string]any{"plugin": plugin, "filter": []any{"exclude:kind=gpu"}},
						},
					}))
					var o runOptions
					cmd := newRunCommandFor(&o)
					if err := cmd.ParseFlags(agentArgs(t, objs)); err != nil {
						t.Fatalf("the agent does not take the chart's flags: %v", err)
					}
					rules := grants(t, objs["ClusterRole/sextant-agent"])
					for _, want := range []string{"pods list", "pods watch", "events create", "events get"} {
						if got := rules[want]; got != o.actsOnPods() {
							t.Errorf("ClusterRole sextant-agent grants %s: %v, want %v (the agent acts on pods: %v)", want, got, o.actsOnPods(), o.actsOnPods())
						}
					}
					for _, key := range []string{"ValidatingAdmissionPolicy/sextant-agent-events", "ValidatingAdmissionPolicyBinding/sextant-agent-events"} {
						if _, got := objs[key]; got != o.actsOnPods() {
							t.Errorf("%s rendered: %v, want %v, with the events rule it narrows", key, got, o.actsOnPods())
						}
					}
					servesPlugin := o.heartbeats && o.devicePlugin
					if got := rules["nodes/status patch"]; got != servesPlugin {
						t.Errorf("ClusterRole sextant-agent grants nodes/status patch: %v, want %v (the agent serves the device plugin: %v)", got, servesPlugin, servesPlugin)
					}
					for _, key := range []string{"ValidatingAdmissionPolicy/sextant-agent-node-status", "ValidatingAdmissionPolicyBinding/sextant-agent-node-status"} {
						if _, got := objs[key]; got != servesPlugin {
							t.Errorf("%s rendered: %v, want %v, with the nodes/status rule it narrows", key, got, servesPlugin)
						}
					}
					// Its metrics server asks the API server about scrapers' tokens.
					for _, want := range []string{"tokenreviews.authentication.k8s.io create", "subjectaccessreviews.authorization.k8s.io create"} {
						if got := rules[want]; got != (o.metricsAddr != "") {
							t.Errorf("ClusterRole sextant-agent grants %s: %v, want %v (the agent serves metrics on %q)", want, got, o.metricsAddr != "", o.metricsAddr)
						}
					}
					if len(o.deviceFilter) != 1 {
						t.Errorf("the agent gets device filter rules %v, want the one of agent.devices.filter", o.deviceFilter)
					}
				})
			}
		}
	}
}

// agentArgs is the rendered DaemonSet's agent container's args, after the subcommand.
func agentArgs(t *testing.T, objs map[string]map[string]any) []string {
	t.Helper()
	ds, ok := objs["DaemonSet/sextant-agent"]
	if !ok {
		t.Fatal("no DaemonSet sextant-agent rendered")
	}
	for _, c := range charttest.Containers(ds) {
		if c["name"] != "agent" {
			continue
		}
		args := charttest.Strings(c["args"])
		if i := slices.Index(args, "run"); i >= 0 {
			return args[i+1:]
		}
		t.Fatalf("the agent container's args %v lack the run subcommand", args)
	}
	t.Fatal("the DaemonSet sextant-agent has no container named agent")
	return nil
}

// grants returns "resource verb" for each resource and verb the role grants, the
// resource as resource.group outside the core group.
func grants(t *testing.T, role map[string]any) map[string]bool {
	t.Helper()
	if role == nil {
		t.Fatal("no ClusterRole sextant-agent rendered")
	}
	out := map[string]bool{}
	rules, _ := role["rules"].([]any)
	for _, r := range rules {
		r, _ := r.(map[string]any)
		groups, _ := r["apiGroups"].([]any)
		resources, _ := r["resources"].([]any)
		verbs, _ := r["verbs"].([]any)
		for _, g := range groups {
			for _, res := range resources {
				for _, v := range verbs {
					name := fmt.Sprint(res)
					if g != "" {
						name += "." + fmt.Sprint(g)
					}
					out[name+" "+fmt.Sprint(v)] = true
				}
			}
		}
	}
	return out
}

// The --cri-endpoint the chart gives the agent names, through the agent's mount,
// the socket sidecar.criSocket names on the host, whichever way it is mounted; the
// directory mount is read-only and is the socket's own directory; the liveness
// deadline reaches the flag.
func TestChartMountsTheCRISocket(t *testing.T) {
	const hostSocket = "/run/k3s/containerd/containerd.sock"
	for _, mount := range []string{"directory", "socket"} {
		t.Run(mount, func(t *testing.T) {
			objs := charttest.Objects(t, charttest.Render(t, map[string]any{
				"sidecar": map[string]any{"criSocket": hostSocket, "criMount": mount, "criLivenessDeadline": "45s"},
			}))
			var o runOptions
			if err := newRunCommandFor(&o).ParseFlags(agentArgs(t, objs)); err != nil {
				t.Fatalf("the agent does not take the chart's flags: %v", err)
			}
			if o.criLivenessDeadline != 45*time.Second {
				t.Errorf("--cri-liveness-deadline %s, want sidecar.criLivenessDeadline's 45s", o.criLivenessDeadline)
			}
			ds := objs["DaemonSet/sextant-agent"]
			var mountPath string
			for _, c := range charttest.Containers(ds) {
				mounts, _ := c["volumeMounts"].([]any)
				for _, m := range mounts {
					m, _ := m.(map[string]any)
					if m["name"] == "cri" {
						mountPath, _ = m["mountPath"].(string)
						if m["readOnly"] != true {
							t.Errorf("the cri mount is not read-only: %v", m)
						}
					}
				}
			}
			var hostPath, hostType string
			spec, _ := ds["spec"].(map[string]any)
			tmpl, _ := spec["template"].(map[string]any)
			podSpec, _ := tmpl["spec"].(map[string]any)
			volumes, _ := podSpec["volumes"].([]any)
			for _, v := range volumes {
				v, _ := v.(map[string]any)
				if v["name"] == "cri" {
					hp, _ := v["hostPath"].(map[string]any)
					hostPath, _ = hp["path"].(string)
					hostType, _ = hp["type"].(string)
				}
			}
			endpoint, ok := cri.SocketPath(o.criEndpoint)
			rel, inside := strings.CutPrefix(endpoint, mountPath)
			if !ok || mountPath == "" || !inside {
				t.Fatalf("--cri-endpoint %q is not under the cri mount %q", o.criEndpoint, mountPath)
			}
			if got := hostPath + rel; got != hostSocket {
				t.Errorf("--cri-endpoint %q reaches %s on the host (volume %s), want %s", o.criEndpoint, got, hostPath, hostSocket)
			}
			want := map[string]string{"directory": "Directory", "socket": "Socket"}[mount]
			if hostType != want {
				t.Errorf("cri volume of type %q, want %s", hostType, want)
			}
			if mount == "directory" && hostPath != filepath.Dir(hostSocket) {
				t.Errorf("cri volume %s, want the socket's own directory %s", hostPath, filepath.Dir(hostSocket))
			}
		})
	}
}

// The agent runs in the host's PID namespace with CAP_KILL exactly when the chart has
// it signal sidecars' processes itself.
func TestChartGivesHostPIDOnlyToSignalProcesses(t *testing.T) {
	for _, signal := range []string{"runtime", "process"} {
		for _, terminator := range []bool{false, true} {
			t.Run(fmt.Sprintf("signal=%s,terminator=%v", signal, terminator), func(t *testing.T) {
				objs := charttest.Objects(t, charttest.Render(t, map[string]any{
					"sidecar": map[string]any{"terminator": terminator, "signal": signal},
				}))
				var o runOptions
				if err := newRunCommandFor(&o).ParseFlags(agentArgs(t, objs)); err != nil {
					t.Fatalf("the agent does not take the chart's flags: %v", err)
				}
				want := terminator && signal == "process"
				if got := o.sidecarTerminator && o.sidecarSignal == sidecarSignalProcess; got != want {
					t.Errorf("the agent signals processes: %v, want %v", got, want)
				}
				ds := objs["DaemonSet/sextant-agent"]
				spec, _ := ds["spec"].(map[string]any)
				tmpl, _ := spec["template"].(map[string]any)
				pod, _ := tmpl["spec"].(map[string]any)
				if got, _ := pod["hostPID"].(bool); got != want {
					t.Errorf("hostPID %v, want %v", got, want)
				}
				var caps []string
				for _, c := range charttest.Containers(ds) {
					if c["name"] == "agent" {
						sc, _ := c["securityContext"].(map[string]any)
						cp, _ := sc["capabilities"].(map[string]any)
						caps = charttest.Strings(cp["add"])
					}
				}
				if got := slices.Contains(caps, "KILL"); got != want {
					t.Errorf("capabilities %v: KILL %v, want %v", caps, got, want)
				}
			})
		}
	}
}

// With agent.devices.dra.kinds, the agent gets --dra-kinds and what the driver needs:
// ResourceSlices and claims in its ClusterRole, the policy that keeps it to its node's
// slices, and a DeviceClass per kind; without, none of it. With the device plugin off,
// the driver still gets the host's /dev.
func TestChartDRA(t *testing.T) {
	for _, tc := range []struct {
		kinds  []any
		plugin bool
	}{{nil, true}, {[]any{"accelerator", "gpu"}, true}, {[]any{"accelerator"}, false}} {
		t.Run(fmt.Sprintf("kinds=%v,plugin=%v", tc.kinds, tc.plugin), func(t *testing.T) {
			// Without the plugin, the terminator and pinning, the DRA audit alone acts
			// on pods.
			objs := charttest.Objects(t, charttest.Render(t, map[string]any{
				"sidecar": map[string]any{"terminator": tc.plugin},
				"agent": map[string]any{
					"numaPinning": map[string]any{"enabled": tc.plugin},
					"devices":     map[string]any{"plugin": tc.plugin, "dra": map[string]any{"kinds": tc.kinds}},
				},
			}))
			var o runOptions
			if err := newRunCommandFor(&o).ParseFlags(agentArgs(t, objs)); err != nil {
				t.Fatalf("the agent does not take the chart's flags: %v", err)
			}
			kinds, err := o.draDeviceKinds()
			if err != nil || len(kinds) != len(tc.kinds) {
				t.Fatalf("--dra-kinds = %v (%v), want %v", kinds, err, tc.kinds)
			}
			on := len(tc.kinds) > 0
			if on && (!o.heartbeats || o.draPluginDir == "" || o.draRegistrarDir == "" || o.cdiDir == "") {
				t.Errorf("the DRA driver without heartbeats (%v) or one of its directories: %q, %q, %q", o.heartbeats, o.draPluginDir, o.draRegistrarDir, o.cdiDir)
			}
			if on && (o.devRoot != "/host/dev" || o.hostDevDir != "/dev") {
				t.Errorf("--dev-root %q, --host-dev-dir %q: want the host's /dev", o.devRoot, o.hostDevDir)
			}
			rules := grants(t, objs["ClusterRole/sextant-agent"])
			for _, want := range []string{"resourceslices.resource.k8s.io create", "resourceslices.resource.k8s.io update", "resourceslices.resource.k8s.io delete", "resourceslices.resource.k8s.io watch", "resourceclaims.resource.k8s.io get"} {
				if rules[want] != on {
					t.Errorf("ClusterRole sextant-agent grants %s: %v, want %v", want, rules[want], on)
				}
			}
			for _, want := range []string{"pods list", "pods watch", "events create"} {
				if rules[want] != o.actsOnPods() {
					t.Errorf("ClusterRole sextant-agent grants %s: %v, want %v (the agent acts on pods: %v)", want, rules[want], o.actsOnPods(), o.actsOnPods())
				}
			}
			if on && (o.podResourcesSocket == "" || o.deviceAuditInterval <= 0) {
				t.Errorf("the DRA audit without PodResources (%q) or an interval (%s)", o.podResourcesSocket, o.deviceAuditInterval)
			}
			for _, key := range []string{"ValidatingAdmissionPolicy/sextant-agent-dra", "ValidatingAdmissionPolicyBinding/sextant-agent-dra"} {
				if _, got := objs[key]; got != on {
					t.Errorf("%s rendered: %v, want %v", key, got, on)
				}
			}
			for _, k := range tc.kinds {
				if _, ok := objs[fmt.Sprintf("DeviceClass/%s.sextant.io", k)]; !ok {
					t.Errorf("no DeviceClass for kind %s", k)
				}
			}
		})
	}
}
