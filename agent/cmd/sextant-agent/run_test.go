package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// parseRun parses args as the run command's flags.
func parseRun(t *testing.T, args ...string) runOptions {
	t.Helper()
	var o runOptions
	if err := newRunCommandFor(&o).ParseFlags(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return o
}

// Each bad flag value is refused before the agent starts anything, naming the flag.
func TestRunRefusesBadFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string // in the error; "" for none
	}{
		{nil, ""},
		{[]string{"--report-threshold", "NaN"}, "--report-threshold NaN"},
		{[]string{"--report-threshold", "1"}, "--report-threshold 1"},
		{[]string{"--device-audit-interval", "0s"}, "--device-audit-interval 0s"},
		{[]string{"--device-audit-interval", "-1s"}, "--device-audit-interval -1s"},
		{[]string{"--device-audit-interval", "0s", "--device-plugin=false"}, ""},
		{[]string{"--attach-mode", "bogus"}, `--attach-mode "bogus": want auto, tcx or clsact`},
		{[]string{"--attach-mode", "tcx"}, ""},
		{[]string{"--sysfs-root", "/nonexistent"}, `--sysfs-root "/nonexistent"`},
		{[]string{"--sysfs-root", file}, "--sysfs-root " + `"` + file + `"`},
		{[]string{"--netns", "/nonexistent/ns"}, `--netns "/nonexistent/ns"`},
		{[]string{"--netns", file}, `--netns "` + file + `": not a namespace`},
		{[]string{"--netns", "/proc/self/ns/net"}, ""},
		{[]string{"--interfaces", "eth["}, `--interfaces "eth["`},
		{[]string{"--interfaces", "eth0,veth*"}, ""},
		{[]string{"--node-name", "Bad_Node!"}, `--node-name "Bad_Node!"`},
		{[]string{"--kubepods-cgroup", "../../etc"}, `--kubepods-cgroup "../../etc"`},
		{[]string{"--kubepods-cgroup", "custom/kubepods.slice"}, ""},
		{[]string{"--host-dev-dir", "relative/dev"}, `--host-dev-dir "relative/dev"`},
		{[]string{"--cri-endpoint", "tcp://1.2.3.4:5"}, `--cri-endpoint "tcp://1.2.3.4:5": want containerd's unix socket`},
		{[]string{"--cri-endpoint", ""}, `--cri-endpoint "": want containerd's unix socket`},
		{[]string{"--cri-endpoint", "unix://"}, `--cri-endpoint "unix://": want containerd's unix socket`},
		{[]string{"--cri-endpoint", "/run/k3s/containerd/containerd.sock"}, ""},
		{[]string{"--cri-endpoint", "unix:///run/sextant/containerd.sock"}, ""},
		{[]string{"--cri-endpoint", "", "--sidecar-terminator=false", "--numa-pinning=false"}, ""},
		{[]string{"--cri-liveness-deadline", "-1s"}, "--cri-liveness-deadline -1s"},
		{[]string{"--cri-liveness-deadline", "0s"}, ""},
		{[]string{"--cri-liveness-deadline", "30s"}, ""},
		{[]string{"--containerd-namespace", ""}, "--containerd-namespace is empty"},
		{[]string{"--pod-resources-socket", ""}, "--pod-resources-socket is empty"},
		{[]string{"--pod-resources-socket", "", "--numa-pinning=false", "--device-plugin=false"}, ""},
		{[]string{"--metrics-max-inflight", "0"}, "--metrics-max-inflight 0: want at least 1"},
		{[]string{"--metrics-write-timeout", "0s"}, "--metrics-write-timeout 0s"},
		{[]string{"--metrics-read-header-timeout", "1m"}, "--metrics-read-header-timeout 1m0s: want at most --metrics-read-timeout"},
		{[]string{"--metrics-auth-cache-ttl", "-1s"}, "--metrics-auth-cache-ttl -1s"},
		{[]string{"--metrics-auth-cache-ttl", "0s"}, ""},
		{[]string{"--metrics-max-inflight", "0", "--metrics-addr", ""}, ""},
		{[]string{"--kube-api-qps", "0"}, "--kube-api-qps 0: want"},
		{[]string{"--kube-api-qps", "NaN"}, "--kube-api-qps NaN: want"},
		{[]string{"--kube-api-qps", "2.5"}, ""},
		{[]string{"--kube-api-burst", "0"}, "--kube-api-burst 0: want 1 to 10000"},
		{[]string{"--kube-api-burst", "1"}, ""},
		{[]string{"--dra-kinds", "accelerator,gpu"}, ""},
		{[]string{"--dra-kinds", "tpu"}, `--dra-kinds: unknown device kind "tpu" (want gpu, nic, nvme or accelerator)`},
		{[]string{"--dra-kinds", "other"}, `unknown device kind "other"`},
		{[]string{"--dra-kinds", "gpu", "--heartbeats=false"}, "--dra-kinds needs --heartbeats"},
		{[]string{"--dra-kinds", "gpu", "--cdi-dir", ""}, "must not be empty with --dra-kinds"},
	} {
		o := parseRun(t, append([]string{"--node-name", "n1"}, tc.args...)...)
		err := o.validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want no error", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// An address the metrics server cannot listen on fails the start, naming the flag,
// before any client is made (the kubeconfig here does not exist).
func TestRunFailsOnMetricsAddress(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, addr := range []string{"bogus", taken.Addr().String()} {
		o := parseRun(t, "--node-name", "n1", "--metrics-addr", addr, "--kubeconfig", filepath.Join(t.TempDir(), "none"),
			"--heartbeats=false", "--numa-pinning=false")
		err := runAgent(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
			t.Errorf("--metrics-addr %s: error %v, want one naming --metrics-addr", addr, err)
		}
	}
}
