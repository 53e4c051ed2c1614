package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// runMainEnv makes the test binary run sextant-ranker's main with the arguments after
// "--" instead of the tests: kube-scheduler exits the process after
// --write-config-to, so the command is run in a child process.
const runMainEnv = "SEXTANT_RANKER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"sextant-ranker"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// --write-config-to writes the configuration and exits without an API server: the
// plugins' heartbeat store is not waited for.
func TestWriteConfigWithoutAPIServer(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// Port 1 on loopback: nothing listens, every request is refused at once.
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: none, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	written := filepath.Join(dir, "written.yaml")
	// Well under the minute the heartbeat store would wait for its API server.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "--",
		"--kubeconfig", kubeconfig, "--secure-port=0", "--write-config-to", written)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Fatalf("sextant-ranker --write-config-to without an API server: %v\n%s", err, strings.Join(lines[max(len(lines)-10, 0):], "\n"))
	}
	data, err := os.ReadFile(written)
	if err != nil {
		t.Fatal(err)
	}
	var cfg schedconfigv1.KubeSchedulerConfiguration
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("the written configuration: %v\n%s", err, data)
	}
	if len(cfg.Profiles) != 1 || ptr.Deref(cfg.Profiles[0].SchedulerName, "") != "sextant" {
		t.Errorf("written profiles %+v, want the one profile sextant", cfg.Profiles)
	}
}
