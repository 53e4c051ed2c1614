//go:build e2e

// Package e2e holds tests against the real local cluster of scripts/cluster.sh: a real
// kube-apiserver, kube-controller-manager, kubelet and containerd. Run them with
// `make test-e2e`, which brings the cluster up and sets KUBECONFIG.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// cluster is what every test needs to reach the local cluster.
type cluster struct {
	config   *rest.Config
	kube     kubernetes.Interface
	dynamic  dynamic.Interface
	apiext   apiextensionsclient.Interface
	nodeName string
}

var local *cluster

func TestMain(m *testing.M) {
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		fmt.Fprintln(os.Stderr, "e2e: KUBECONFIG is not set; run through `make test-e2e`, which starts the local cluster")
		os.Exit(1)
	}
	c, err := connect(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	local = c
	code := m.Run()
	removeBinaries()
	os.Exit(code)
}

func connect(kubeconfig string) (*cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	c := &cluster{config: cfg}
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.apiext, err = apiextensionsclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "sextant.io/local=true"})
	if err != nil {
		return nil, fmt.Errorf("list the local node: %w", err)
	}
	if len(nodes.Items) != 1 {
		return nil, fmt.Errorf("want exactly one node labelled sextant.io/local=true, found %d", len(nodes.Items))
	}
	c.nodeName = nodes.Items[0].Name
	return c, nil
}

// repoRoot is the repository's top directory, found from this file's location.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test's source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// testNamespace creates a namespace for one test and deletes it when the test ends.
func testNamespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns, err := local.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = local.kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	// Pods are refused until the service account controller made the default account.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := local.kube.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s has no default service account: %v", ns.Name, err)
	}
	return ns.Name
}
