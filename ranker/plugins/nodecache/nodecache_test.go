package nodecache

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

type heartbeat struct{ capacity int }

func TestGetComputesOncePerGenerationAndSource(t *testing.T) {
	c := New[*heartbeat, int]()
	calls := 0
	compute := func(v int) func() int { return func() int { calls++; return v } }
	a, b := &heartbeat{8}, &heartbeat{8} // equal content, different objects

	steps := []struct {
		name       string
		node       string
		generation int64
		source     *heartbeat
		compute    int
		want       int
		wantCalls  int
	}{
		{"first sight computes", "n1", 1, a, 10, 10, 1},
		{"same pair is a hit", "n1", 1, a, 99, 10, 1},
		{"new generation (a pod came or went) recomputes", "n1", 2, a, 20, 20, 2},
		{"new heartbeat object recomputes", "n1", 2, b, 30, 30, 3},
		{"another node is its own entry", "n2", 2, b, 40, 40, 4},
		{"the first node still hits", "n1", 2, b, 99, 30, 4},
		{"an older generation (a transient clone) recomputes", "n1", 1, b, 50, 50, 5},
	}
	for _, s := range steps {
		if got := c.Get(s.node, s.generation, s.source, compute(s.compute)); got != s.want || calls != s.wantCalls {
			t.Errorf("%s: got %d after %d computations, want %d after %d", s.name, got, calls, s.want, s.wantCalls)
		}
	}
	c.Forget("n1")
	if c.Len() != 1 {
		t.Errorf("after Forget: %d nodes held, want 1", c.Len())
	}
	if got := c.Get("n1", 1, b, compute(60)); got != 60 {
		t.Errorf("a forgotten node must be computed again: got %d", got)
	}
}

func TestForgetDeletedNodes(t *testing.T) {
	kube := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kept"}})
	factory := informers.NewSharedInformerFactory(kube, 0)
	c := New[*heartbeat, int]()
	inf := factory.Core().V1().Nodes().Informer()
	if err := c.ForgetDeletedNodes(inf); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	// The fake clientset's watch may start after its list, and drops what happens in
	// between: wait until the informer hears a new Node, so the watch is live.
	if _, err := kube.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, ok, _ := inf.GetStore().GetByKey("probe")
		return ok, nil
	})
	if err != nil {
		t.Fatal("the informer never saw the probe Node")
	}
	hb := &heartbeat{1}
	c.Get("gone", 1, hb, func() int { return 1 })
	c.Get("kept", 1, hb, func() int { return 2 })
	if err := kube.CoreV1().Nodes().Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return c.Len() == 1, nil
	})
	if err != nil {
		t.Fatalf("the deleted Node's entry is still held: %d entries", c.Len())
	}
	calls := 0
	if got := c.Get("kept", 1, hb, func() int { calls++; return 9 }); got != 2 || calls != 0 {
		t.Errorf("the remaining node's entry: got %d after %d computations, want the cached 2", got, calls)
	}
}
