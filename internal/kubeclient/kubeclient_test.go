package kubeclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://%s:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

func write(t *testing.T, host string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(kubeconfig, "%s", host)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfig(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", write(t, "from-env"))
	cfg, err := Config("")
	if err != nil || cfg.Host != "https://from-env:6443" {
		t.Fatalf("$KUBECONFIG: %v, %v", cfg, err)
	}
	cfg, err = Config(write(t, "explicit"))
	if err != nil || cfg.Host != "https://explicit:6443" {
		t.Fatalf("an explicit path must win over $KUBECONFIG: %v, %v", cfg, err)
	}
	if _, err := Config(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing file: %v, want an error naming it", err)
	}
	t.Setenv("KUBECONFIG", "")
	if _, err := Config(""); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("nothing to load: %v, want an error that says to pass --kubeconfig", err)
	}
}
