package devices

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/numa"
)

// TestThroughFramework runs NUMAAware and DeviceAware through kube-scheduler's own
// framework runtime, in the order the "sextant" profile enables them, to check that they
// cooperate through the CycleState as the runtime really calls them (skips, score
// validation, reserve order, no PreBind), once with SextantBinder (the Binding carries
// the decisions and nothing is patched) and once with DefaultBinder, where Reserve fails
// for a pod with a decision: nothing would carry it to the pod.
func TestThroughFramework(t *testing.T) {
	for _, binderName := range []string{defaultbinder.Name, binder.Name} {
		t.Run(binderName, func(t *testing.T) { testThroughFramework(t, binderName) })
	}
}

func testThroughFramework(t *testing.T, binderName string) {
	ctx := context.Background()
	schedmetrics.Register() // the runtime instruments plugins with the scheduler's metrics
	topo := topology("node-1", 2, 4,
		gpu("0000:3b:00.0", 0), gpu("0000:3c:00.0", 0), gpu("0000:af:00.0", 1), gpu("0000:b0:00.0", 1))
	busy := on("node-1", pod("busy", "3", nil, map[string]string{annotations.NUMANodes: "0"}))
	nodes := []*v1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}, // no NodeTopology
	}
	snapshot := cache.NewSnapshot([]*v1.Pod{busy}, nodes)
	store := heartbeat.NewFromObjects(topo, &v1alpha1.NodeBandwidth{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	client := fake.NewClientset()
	// The fake clientset does not apply Bindings; keep them to check what they carry.
	bindings := map[string]*v1.Binding{}
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*v1.Binding)
		bindings[b.Name] = b
		return true, b, nil
	})
	newBinder, binderPoints := defaultbinder.New, []string{"Bind"}
	if binderName == binder.Name {
		newBinder, binderPoints = binder.New, []string{"PreFilter", "Bind"}
	}
	lookup := func(h fwk.Handle) func(string) (fwk.NodeInfo, error) {
		return func(node string) (fwk.NodeInfo, error) { return h.SnapshotSharedLister().NodeInfos().Get(node) }
	}
	newNUMA := func(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		return numa.NewWith(store, lookup(h)), nil
	}
	newDevices := func(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		return NewWith(store, lookup(h)), nil
	}
	points := []string{"PreFilter", "Filter", "PreScore", "Score", "Reserve"}
	f, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterPluginAsExtensions(binderName, newBinder, binderPoints...),
		tf.RegisterPluginAsExtensions(numa.Name, newNUMA, points...),
		tf.RegisterPluginAsExtensions(Name, newDevices, points...),
	}, "sextant", frameworkruntime.WithSnapshotSharedLister(snapshot), frameworkruntime.WithClientSet(client))
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name        string
		pod         *v1.Pod
		wantNode    string
		wantNUMA    string
		wantDevices string
	}{
		{
			name: "CPUs and GPUs", pod: pod("train", "2", map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 2}, nil),
			wantNode: "node-1", wantNUMA: "1", wantDevices: `{"sextant.io/gpu":["0000:af:00.0","0000:b0:00.0"]}`,
		},
		{
			// Both nodes pass; node-1 scores higher (node-2 has no topology). The one CPU
			// left on NUMA node 0 is enough. No devices asked, none written.
			name: "CPUs only", pod: pod("web", "1", nil, nil), wantNode: "node-1", wantNUMA: "0",
		},
		{
			// Neither plugin has anything to say: the framework skips them, nothing written.
			name: "plain pod", pod: pod("plain", "", nil, nil), wantNode: "node-1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := client.CoreV1().Pods("default").Create(ctx, tc.pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			state := framework.NewCycleState()
			if _, st, _ := f.RunPreFilterPlugins(ctx, state, tc.pod); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			infos, err := snapshot.NodeInfos().List()
			if err != nil {
				t.Fatal(err)
			}
			var feasible []fwk.NodeInfo
			for _, ni := range infos {
				if st := f.RunFilterPlugins(ctx, state, tc.pod, ni); st.IsSuccess() {
					feasible = append(feasible, ni)
				}
			}
			if st := f.RunPreScorePlugins(ctx, state, tc.pod, feasible); !st.IsSuccess() {
				t.Fatalf("PreScore: %v", st)
			}
			scores, st := f.RunScorePlugins(ctx, state, tc.pod, feasible)
			if !st.IsSuccess() {
				t.Fatalf("Score: %v", st)
			}
			best := scores[0]
			for _, s := range scores[1:] {
				if s.TotalScore > best.TotalScore || s.TotalScore == best.TotalScore && s.Name < best.Name {
					best = s
				}
			}
			if best.Name != tc.wantNode {
				t.Fatalf("best node %s, want %s (scores %+v)", best.Name, tc.wantNode, scores)
			}
			st = f.RunReservePluginsReserve(ctx, state, tc.pod, best.Name)
			if binderName != binder.Name && (tc.wantNUMA != "" || tc.wantDevices != "") {
				if st.IsSuccess() || !strings.Contains(st.Message(), "SextantBinder") {
					t.Fatalf("Reserve without SextantBinder = %v, want an error naming SextantBinder", st)
				}
				f.RunReservePluginsUnreserve(ctx, state, tc.pod, best.Name)
				return
			}
			if !st.IsSuccess() {
				t.Fatalf("Reserve: %v", st)
			}
			client.ClearActions()
			// The scheduler patches nominatedNodeName before PreBind unless every
			// preflight skips: nothing needs writing before the Binding.
			if preFlight := f.RunPreBindPreFlights(ctx, state, tc.pod, best.Name); preFlight.Code() != fwk.Skip {
				t.Errorf("PreBindPreFlights = %v, want Skip: the Binding carries the annotations", preFlight)
			}
			if st := f.RunBindPlugins(ctx, state, tc.pod, best.Name); !st.IsSuccess() {
				t.Fatalf("Bind: %v", st)
			}
			got, err := client.CoreV1().Pods("default").Get(ctx, tc.pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			podAnnotations := got.Annotations
			if binderName == binder.Name {
				podAnnotations = bindings[tc.pod.Name].Annotations
				for _, a := range client.Actions() {
					if a.GetVerb() == "patch" {
						t.Errorf("SextantBinder profile patched the pod: %v", a)
					}
				}
			}
			if podAnnotations[annotations.NUMANodes] != tc.wantNUMA || podAnnotations[annotations.DevicesAllocated] != tc.wantDevices {
				t.Errorf("annotations = %v, want %s=%q and %s=%q", podAnnotations,
					annotations.NUMANodes, tc.wantNUMA, annotations.DevicesAllocated, tc.wantDevices)
			}
			if b := bindings[tc.pod.Name]; b == nil || b.Target.Name != best.Name {
				t.Errorf("binding = %+v, want one to %s", b, best.Name)
			}
			f.RunReservePluginsUnreserve(ctx, state, tc.pod, best.Name)
		})
	}
}
