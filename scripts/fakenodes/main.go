// Command fakenodes keeps Node objects without a kubelet alive for the multi-node demo:
// it creates (or adopts) the named nodes with the given capacity, posts them Ready and
// renews their Leases until SIGTERM, as internal/fakenode does for the e2e tests. The
// nodes' agents run as processes in network namespaces of their own (scripts/demo-nodes.sh);
// pods bound there are not run.
//
//	fakenodes --kubeconfig FILE [--cpu 16] [--memory 64Gi] [--label k=v ...] NAME...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"sextant.io/sextant/internal/fakenode"
	"sextant.io/sextant/internal/kubeclient"
)

type labelFlag map[string]string

func (l labelFlag) String() string { return fmt.Sprint(map[string]string(l)) }

func (l labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q: want KEY=VALUE", v)
	}
	l[k] = val
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fakenodes:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster (default $KUBECONFIG, then ~/.kube/config)")
	cpu := flag.String("cpu", "16", "CPU capacity of each node (a quantity)")
	memory := flag.String("memory", "64Gi", "memory capacity of each node (a quantity)")
	labels := labelFlag{"sextant.io/agent": "none"}
	flag.Var(labels, "label", "label for each node as KEY=VALUE; repeatable (sextant.io/agent=none is always set, so the agent DaemonSet skips them)")
	flag.Parse()
	if flag.NArg() == 0 {
		return fmt.Errorf("no node names given; usage: fakenodes --kubeconfig FILE NAME...")
	}
	capacity := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	for name, v := range map[corev1.ResourceName]string{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *memory} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return fmt.Errorf("--%s %q: want a quantity such as 16 or 64Gi: %w", name, v, err)
		}
		capacity[name] = q
	}
	cfg, err := kubeclient.Config(*kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var wg sync.WaitGroup
	for _, name := range flag.Args() {
		node, err := fakenode.Create(ctx, client, metav1.ObjectMeta{Name: name, Labels: labels}, capacity)
		if err != nil {
			return err
		}
		fmt.Printf("fakenodes: node %s is Ready; renewing its lease\n", name)
		wg.Go(func() { fakenode.Keep(ctx, client, node) })
	}
	wg.Wait()
	return nil
}
