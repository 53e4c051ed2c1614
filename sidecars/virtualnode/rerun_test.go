package virtualnode

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// A controller that stopped (its replica lost the lease) and runs again (won it back)
// works as the first time: informers and queue cannot be restarted, so each run must
// have its own.
func TestRunAgainAfterStop(t *testing.T) {
	virtual := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vk", Labels: map[string]string{NodeTypeLabel: NodeTypeVirtual}}}
	kube := fake.NewClientset(virtual)
	c, err := New(Config{ExitImage: exitImage}, kube, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	swapped := func(ctx context.Context, name string) error {
		return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := kube.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Spec.InitContainers[0].Image == exitImage, nil
		})
	}
	for term, name := range []string{"first", "second", "third"} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		if _, err := kube.CoreV1().Pods("ns").Create(ctx, preparedPod(name, "vk", corev1.RestartPolicyNever, ptr.To[int32](0)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		err := swapped(ctx, name)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run %d returned %v", term+1, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("run %d did not return after its context ended", term+1)
		}
		if err != nil {
			t.Fatalf("run %d: the sidecar of pod %s was not swapped", term+1, name)
		}
	}
}

func TestRunTwiceAtOnceRefused(t *testing.T) {
	c, err := New(Config{ExitImage: exitImage}, fake.NewClientset(), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually := time.Now().Add(5 * time.Second)
	for !c.running.Load() && time.Now().Before(eventually) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Run(ctx); err == nil {
		t.Error("a second Run while the first runs: no error")
	}
}
