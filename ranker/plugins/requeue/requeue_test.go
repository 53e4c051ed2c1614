package requeue

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

func pod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)}}
}

func nodes(names ...string) []fwk.NodeInfo {
	var out []fwk.NodeInfo
	for _, n := range names {
		ni := framework.NewNodeInfo()
		ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		out = append(out, ni)
	}
	return out
}

type recorder struct{ batches [][]string }

func (r *recorder) activate(_ klog.Logger, pods map[string]*v1.Pod) {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	r.batches = append(r.batches, names)
}

func TestRejectedBy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    func(*framework.NodeToStatus)
		plugin string
		want   bool
	}{
		{"rejected on one node", func(m *framework.NodeToStatus) {
			m.Set("a", fwk.NewStatus(fwk.Unschedulable, "x").WithPlugin("NodeResourcesFit"))
			m.Set("b", fwk.NewStatus(fwk.Unschedulable, "y").WithPlugin("P"))
		}, "P", true},
		{"only by others", func(m *framework.NodeToStatus) {
			m.Set("a", fwk.NewStatus(fwk.Unschedulable, "x").WithPlugin("NodeResourcesFit"))
		}, "P", false},
		{"at PreFilter (every node)", func(m *framework.NodeToStatus) {
			m.SetAbsentNodesStatus(fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "bad").WithPlugin("P"))
		}, "P", true},
		{"nothing", func(*framework.NodeToStatus) {}, "P", false},
	} {
		m := framework.NewDefaultNodeToStatus()
		tc.set(m)
		if got := RejectedBy(tc.plugin, m, nodes("a", "b")); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if RejectedBy("P", nil, nodes("a")) {
		t.Error("no statuses: rejected")
	}
}

func TestWaiting(t *testing.T) {
	r := &recorder{}
	w := New("P", r.activate)
	rejected := framework.NewDefaultNodeToStatus()
	rejected.Set("a", fwk.NewStatus(fwk.Unschedulable, "no room").WithPlugin("P"))
	other := framework.NewDefaultNodeToStatus()
	other.Set("a", fwk.NewStatus(fwk.Unschedulable, "no cpu").WithPlugin("Q"))
	ctx := context.Background()

	for _, name := range []string{"p1", "p2", "p3"} {
		if _, st := w.PostFilter(ctx, pod(name), rejected, nodes("a"), func() bool { return false }); st.Code() != fwk.Unschedulable || st.Message() != "" {
			t.Fatalf("PostFilter = %v, want Unschedulable without a message", st)
		}
	}
	w.PostFilter(ctx, pod("q"), other, nodes("a"), nil)
	if w.Len() != 3 {
		t.Fatalf("%d waiting, want 3 (not the pod Q rejected)", w.Len())
	}
	if n := w.Activate(klog.Background(), func(p *v1.Pod) bool { return p.Name != "p2" }); n != 2 {
		t.Errorf("activated %d, want 2", n)
	}
	if w.Len() != 1 || len(r.batches) != 1 || !slices.Equal(r.batches[0], []string{"p1", "p3"}) {
		t.Errorf("batches %v, %d waiting; want [[p1 p3]], 1", r.batches, w.Len())
	}
	// None admitted: no call at all.
	w.Activate(klog.Background(), func(*v1.Pod) bool { return false })
	if len(r.batches) != 1 {
		t.Errorf("an empty batch was activated: %v", r.batches)
	}

	// A change during the attempt: the pod is activated at once.
	w.PostFilter(ctx, pod("p4"), rejected, nodes("a"), func() bool { return true })
	if last := r.batches[len(r.batches)-1]; !slices.Equal(last, []string{"p4"}) {
		t.Errorf("last batch %v, want [p4]", last)
	}

	// Bound or deleted pods are forgotten.
	h := w.PodHandler().(cache.ResourceEventHandlerFuncs)
	bound := pod("p2")
	bound.Spec.NodeName = "a"
	h.UpdateFunc(pod("p2"), bound)
	if w.Len() != 0 {
		t.Errorf("%d waiting after p2 was bound, want 0", w.Len())
	}
	w.PostFilter(ctx, pod("p5"), rejected, nodes("a"), nil)
	h.DeleteFunc(cache.DeletedFinalStateUnknown{Key: "default/p5", Obj: pod("p5")})
	if w.Len() != 0 {
		t.Errorf("%d waiting after p5 was deleted, want 0", w.Len())
	}
}

// A pod deleted while its attempt ran: the informer's deletion reaches the handler
// before PostFilter records the pod, and nothing would ever remove it. PostFilter checks
// the informer's store; a pod made again under the name is not the one that waited.
func TestPostFilterDropsPodsDeletedDuringTheAttempt(t *testing.T) {
	kept, deleted, remade := pod("kept"), pod("deleted"), pod("remade")
	// Not started: the test sets the store as the informer would have after the
	// deletions, which a fake clientset's watch may miss.
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1.Pod{}, 0, cache.Indexers{})
	w := New("P", (&recorder{}).activate)
	if err := w.WatchPods(informer); err != nil {
		t.Fatal(err)
	}
	again := remade.DeepCopy()
	again.UID = "remade-2"
	for _, p := range []*v1.Pod{kept, again} {
		if err := informer.GetStore().Add(p); err != nil {
			t.Fatal(err)
		}
	}

	statuses := framework.NewDefaultNodeToStatus()
	statuses.Set("n", fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "no").WithPlugin("P"))
	for _, p := range []*v1.Pod{kept, deleted, remade} {
		w.PostFilter(context.Background(), p, statuses, nodes("n"), nil)
	}
	w.mu.Lock()
	var waiting []string
	for _, p := range w.pods {
		waiting = append(waiting, p.Name)
	}
	w.mu.Unlock()
	slices.Sort(waiting)
	if !slices.Equal(waiting, []string{"kept"}) {
		t.Errorf("waiting %v, want [kept]: a pod gone before PostFilter recorded it waits for good", waiting)
	}
}
