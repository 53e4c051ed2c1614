package podledger

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func TestReserveGetForget(t *testing.T) {
	var size int
	l := New[[]int32](func(n int) { size = n })
	l.Reserve("a", "node-1", []int32{0})
	l.Reserve("b", "node-2", []int32{1})
	l.Reserve("a", "node-1", []int32{0, 1}) // replaces
	if size != 2 {
		t.Errorf("size reported %d, want 2", size)
	}
	if v, ok := l.Get("a", "node-1"); !ok || len(v) != 2 {
		t.Errorf("Get(a, node-1) = %v, %v; want [0 1]", v, ok)
	}
	if _, ok := l.Get("a", "node-2"); ok {
		t.Error("a reservation on another node must not count")
	}
	l.Forget("a")
	l.Forget("never-reserved")
	if _, ok := l.Get("a", "node-1"); ok || size != 1 {
		t.Errorf("after Forget: held %v, size %d; want false, 1", ok, size)
	}
	New[int](nil).Reserve("c", "n", 1) // no size function: no panic
}

const annotation = "test.sextant.io/done"

func pod(name, node string, annotated bool) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)},
		Spec: v1.PodSpec{NodeName: node}}
	if annotated {
		p.Annotations = map[string]string{annotation: "x"}
	}
	return p
}

// A pod that shows up annotated is forgotten after the delay, a deleted one at once,
// and one updated without the annotation is kept.
func TestForgetOnPodEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Pods().Informer()
	l := New[int](nil)
	const delay = 200 * time.Millisecond
	if err := l.forgetOnPodEvents(inf, func(p *v1.Pod) bool { return p.Annotations[annotation] != "" }, delay); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)

	pods := client.CoreV1().Pods("default")
	for _, name := range []string{"annotated", "deleted", "plain"} {
		if _, err := pods.Create(ctx, pod(name, "n", false), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		l.Reserve(types.UID(name), "n", 1)
	}
	start := time.Now()
	if _, err := pods.Update(ctx, pod("annotated", "n", true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Update(ctx, pod("plain", "n", false), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	held := func(name string) bool { _, ok := l.Get(types.UID(name), "n"); return ok }
	waitFor(t, "the deleted pod forgotten", func() bool { return !held("deleted") })
	// Held first, then the clock: read the other way round, the forget timer could fire
	// between the two and look early.
	if annotatedHeld := held("annotated"); !annotatedHeld && time.Since(start) < delay {
		t.Error("the annotated pod was forgotten before the delay")
	}
	waitFor(t, "the annotated pod forgotten", func() bool { return !held("annotated") })
	if !held("plain") {
		t.Error("a pod updated without the annotation lost its reservation")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
