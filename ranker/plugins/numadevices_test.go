package plugins_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"sextant.io/sextant/ranker/plugins/cycletest"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	internalqueue "k8s.io/kubernetes/pkg/scheduler/backend/queue"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/devices"
	"sextant.io/sextant/ranker/plugins/numa"
	"sextant.io/sextant/ranker/plugins/numahint"
)

// NUMAAware and DeviceAware together: they meet only through numahint, so what one
// decides for the other is tested here, where both are built.

// bothPlugins builds NUMAAware and DeviceAware over the same topologies and node
// snapshot, DeviceAware as NUMAAware's device provider.
func bothPlugins(t *testing.T, infos []*framework.NodeInfo, topos ...*v1alpha1.NodeTopology) (*numa.NUMAAware, *devices.DeviceAware) {
	t.Helper()
	store, lookup := cycletest.Heartbeats(topos...), cycletest.Snapshot(infos)
	dp := devices.NewWith(store, lookup)
	return numa.NewWith(store, lookup).WithDevices(dp), dp
}

// picked is the devices Reserve staged for the pod's Binding, nil when it staged none.
func picked(t *testing.T, state fwk.CycleState) annotations.Allocation {
	t.Helper()
	staged, ok := binder.Staged(state)[annotations.DevicesAllocated]
	if !ok {
		return nil
	}
	a, err := annotations.ParseAllocation(staged)
	if err != nil {
		t.Fatalf("staged allocation: %v", err)
	}
	return a
}

func withMemory(p *v1.Pod, bytes int64) *v1.Pod {
	p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = *resource.NewQuantity(bytes, resource.BinarySI)
	return p
}

// heldBy publishes h as the holder of a device, as the agent does from the kubelet's
// PodResources.
func heldBy(h v1alpha1.DeviceHolder) func(*v1alpha1.PCIDevice) {
	return func(d *v1alpha1.PCIDevice) { d.Holder = &h }
}

// The device case: 2 GPUs asked on a node with 4 GPUs, 2 per NUMA node. NUMA node 0's
// CPUs are mostly taken, so NUMAAware gives the pod NUMA node 1; both GPU IDs must come
// from NUMA node 1 too, although NUMA node 0's GPUs have the lower addresses.
func TestDeviceCaseFollowsNUMAChoice(t *testing.T) {
	topo := cycletest.Topology("node-1", 2, 4,
		cycletest.GPU("0000:3b:00.0", 0), cycletest.GPU("0000:3c:00.0", 0), cycletest.GPU("0000:af:00.0", 1), cycletest.GPU("0000:b0:00.0", 1))
	busy := cycletest.On("node-1", cycletest.Pod("busy", "3", nil, map[string]string{annotations.NUMANodes: "0"}))
	ni := cycletest.NodeInfo("node-1", busy)
	np, dp := bothPlugins(t, []*framework.NodeInfo{ni}, topo)
	p := cycletest.Pod("train", "2", map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 2}, nil)
	r := cycletest.Schedule(t, p, []*framework.NodeInfo{ni}, np, dp)
	if r.Selected != "node-1" {
		t.Fatalf("not scheduled: %v", r.Filter)
	}
	cpus, ok := numahint.Reserved(r.State, "node-1")
	if !ok || annotations.FormatNUMANodes(cpus) != "1" {
		t.Fatalf("NUMAAware chose %v, want NUMA node 1", cpus)
	}
	want := annotations.Allocation{"sextant.io/gpu": {"0000:af:00.0", "0000:b0:00.0"}}
	if got := picked(t, r.State); got.String() != want.String() {
		t.Fatalf("picked %s, want %s (both on NUMA node 1)", got, want)
	}
	if r.Scores[devices.Name]["node-1"] != fwk.MaxNodeScore {
		t.Errorf("DeviceAware score = %d, want %d", r.Scores[devices.Name]["node-1"], fwk.MaxNodeScore)
	}
	// What SextantBinder's Binding will carry onto the pod.
	if got := binder.Staged(r.State); got[annotations.NUMANodes] != "1" || got[annotations.DevicesAllocated] != `{"sextant.io/gpu":["0000:af:00.0","0000:b0:00.0"]}` {
		t.Errorf("staged annotations = %v", got)
	}
}

// TestScoreCountsDevicesInTheNUMASet: the NUMA set counts the devices (see
// TestOneNUMASet), so the node that holds the pod's GPUs in one NUMA node wins on
// NUMAAware's score, whether or not the pod asks for CPU; DeviceAware's own score is
// full on both, every device being inside the chosen set.
func TestScoreCountsDevicesInTheNUMASet(t *testing.T) {
	twoGPUs := map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 2}
	// split: one GPU per NUMA node, together: both GPUs on NUMA node 1.
	split := cycletest.Topology("split", 2, 4, cycletest.GPU("0000:01:00.0", 0), cycletest.GPU("0000:81:00.0", 1))
	together := cycletest.Topology("together", 2, 4, cycletest.GPU("0000:81:00.0", 1), cycletest.GPU("0000:82:00.0", 1))
	for _, cpu := range []string{"", "1"} {
		t.Run("cpu="+cpu, func(t *testing.T) {
			infos := []*framework.NodeInfo{cycletest.NodeInfo("split"), cycletest.NodeInfo("together")}
			np, dp := bothPlugins(t, infos, split, together)
			r := cycletest.Schedule(t, cycletest.Pod("p", cpu, twoGPUs, nil), infos, np, dp)
			if r.Selected != "together" {
				t.Errorf("selected %q, want together", r.Selected)
			}
			if n := r.Scores[numa.Name]; n["together"] <= n["split"] {
				t.Errorf("NUMAAware scores = %v, want together above split", n)
			}
			if d := r.Scores[devices.Name]; d["split"] != fwk.MaxNodeScore || d["together"] != fwk.MaxNodeScore {
				t.Errorf("DeviceAware scores = %v, want %d on both", d, fwk.MaxNodeScore)
			}
		})
	}
}

// TestOneNUMASet: NUMAAware chooses one set of NUMA nodes that holds the pod's CPUs,
// memory and devices together (the smallest, then the closest, then the lowest IDs), and
// DeviceAware picks the devices inside it; the answer is the same whichever plugin the
// framework calls first.
func TestOneNUMASet(t *testing.T) {
	gpus := func(n int64) map[v1alpha1.DeviceKind]int64 { return map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: n} }
	single := map[string]string{annotations.NUMAPolicy: string(annotations.PolicySingleNUMANode)}
	// eight NUMA nodes of 2 CPUs and one GPU each; 0, 1 and 5 are close to each other.
	eight := cycletest.Topology("n", 8, 2,
		cycletest.GPU("0000:10:00.0", 0), cycletest.GPU("0000:11:00.0", 1), cycletest.GPU("0000:12:00.0", 2), cycletest.GPU("0000:13:00.0", 3),
		cycletest.GPU("0000:14:00.0", 4), cycletest.GPU("0000:15:00.0", 5), cycletest.GPU("0000:16:00.0", 6), cycletest.GPU("0000:17:00.0", 7))
	for i := range eight.Status.NUMANodes {
		for j := range eight.Status.NUMANodes[i].Distances {
			close := (i == 0 || i == 1 || i == 5) && (j == 0 || j == 1 || j == 5)
			switch {
			case i == j:
				eight.Status.NUMANodes[i].Distances[j] = 10
			case close:
				eight.Status.NUMANodes[i].Distances[j] = 11
			case j == i+1 || i == j+1:
				eight.Status.NUMANodes[i].Distances[j] = 16
			}
		}
	}
	// NUMA node 1 has memory and a GPU but no CPUs.
	cpuless := cycletest.Topology("n", 2, 4, cycletest.GPU("0000:90:00.0", 0), cycletest.GPU("0000:10:00.0", 1))
	cpuless.Status.NUMANodes[1].CPUs = nil
	// NUMA nodes listed out of ID order.
	unsorted := cycletest.Topology("n", 2, 4, cycletest.GPU("0000:3b:00.0", 1))
	unsorted.Status.NUMANodes[0], unsorted.Status.NUMANodes[1] = unsorted.Status.NUMANodes[1], unsorted.Status.NUMANodes[0]

	for _, tc := range []struct {
		name     string
		topo     *v1alpha1.NodeTopology
		others   []*v1.Pod
		pod      *v1.Pod
		wantNUMA string
		wantGPUs []string
		// wantReject, if set, is part of the Filter message that drops the node.
		wantReject string
	}{
		{name: "CPU only: one NUMA node, as before", topo: cycletest.Topology("n", 2, 4, cycletest.GPU("0000:3b:00.0", 1)),
			pod: withMemory(cycletest.Pod("p", "2", nil, nil), 2*cycletest.GiB), wantNUMA: "0"},
		{name: "memory forces two NUMA nodes", topo: cycletest.Topology("n", 2, 4),
			pod: withMemory(cycletest.Pod("p", "1", nil, nil), 12*cycletest.GiB), wantNUMA: "0,1"},
		{name: "devices force a second NUMA node", topo: cycletest.Topology("n", 4, 4, cycletest.GPU("0000:3b:00.0", 0), cycletest.GPU("0000:af:00.0", 1)),
			pod: withMemory(cycletest.Pod("p", "2", gpus(2), nil), 2*cycletest.GiB), wantNUMA: "0,1", wantGPUs: []string{"0000:3b:00.0", "0000:af:00.0"}},
		{name: "devices alone pick the NUMA node", topo: cycletest.Topology("n", 2, 4, cycletest.GPU("0000:af:00.0", 1)),
			pod: withMemory(cycletest.Pod("p", "1", gpus(1), nil), cycletest.GiB), wantNUMA: "1", wantGPUs: []string{"0000:af:00.0"}},
		{name: "distance decides among three-node sets", topo: eight,
			pod: cycletest.Pod("p", "1", gpus(3), nil), wantNUMA: "0,1,5", wantGPUs: []string{"0000:10:00.0", "0000:11:00.0", "0000:15:00.0"}},
		{name: "unsorted NUMA IDs", topo: unsorted,
			pod: cycletest.Pod("p", "1", gpus(1), nil), wantNUMA: "1", wantGPUs: []string{"0000:3b:00.0"}},
		{name: "unhealthy devices do not count", topo: cycletest.Topology("n", 2, 4, cycletest.Device{"0000:3b:00.0", v1alpha1.KindGPU, 0, false}, cycletest.GPU("0000:af:00.0", 1)),
			pod: cycletest.Pod("p", "1", gpus(1), nil), wantNUMA: "1", wantGPUs: []string{"0000:af:00.0"}},
		{name: "allocated devices do not count", topo: cycletest.Topology("n", 2, 4, cycletest.GPU("0000:3b:00.0", 0), cycletest.GPU("0000:af:00.0", 1)),
			others: []*v1.Pod{cycletest.On("n", cycletest.Pod("holder", "", gpus(1), cycletest.Allocated(v1alpha1.KindGPU, "0000:3b:00.0")))},
			pod:    cycletest.Pod("p", "1", gpus(1), nil), wantNUMA: "1", wantGPUs: []string{"0000:af:00.0"}},
		{name: "inside the set, devices near the pod's CPUs first", topo: cpuless,
			pod: withMemory(cycletest.Pod("p", "1", gpus(1), nil), 12*cycletest.GiB), wantNUMA: "0,1", wantGPUs: []string{"0000:90:00.0"}},
		{name: "a device of unknown NUMA node fits any set", topo: cycletest.Topology("n", 2, 4, cycletest.GPU("0000:3b:00.0", 0), cycletest.GPU("0000:af:00.0", -1)),
			pod: cycletest.Pod("p", "1", gpus(2), nil), wantNUMA: "0", wantGPUs: []string{"0000:3b:00.0", "0000:af:00.0"}},
		{
			// NUMAAware pins the pod to NUMA node 0 (its CPUs fit there, and the device
			// of unknown NUMA node fits any set): the GPU known to sit on NUMA node 1
			// would break that pinning, the unknown one may not.
			name: "a device of unknown NUMA node before one outside the set", topo: cycletest.Topology("n", 2, 4, cycletest.GPU("0000:81:00.0", 1), cycletest.GPU("0000:05:00.0", -1)),
			pod: cycletest.Pod("p", "2", gpus(1), nil), wantNUMA: "0", wantGPUs: []string{"0000:05:00.0"},
		},
		{name: "single-numa-node with devices on one NUMA node", topo: cycletest.Topology("n", 2, 4, cycletest.GPU("0000:3b:00.0", 0), cycletest.GPU("0000:af:00.0", 1), cycletest.GPU("0000:b0:00.0", 1)),
			pod: cycletest.Pod("p", "1", gpus(2), single), wantNUMA: "1", wantGPUs: []string{"0000:af:00.0", "0000:b0:00.0"}},
		{name: "single-numa-node: the devices do not fit one NUMA node", topo: cycletest.Topology("n", 2, 4, cycletest.GPU("0000:3b:00.0", 0), cycletest.GPU("0000:af:00.0", 1)),
			pod: cycletest.Pod("p", "1", gpus(2), single), wantReject: "single NUMA node with enough free sextant.io/gpu"},
		{name: "single-numa-node: a device of unknown NUMA node does not count", topo: cycletest.Topology("n", 2, 4, cycletest.GPU("0000:3b:00.0", 0), cycletest.GPU("0000:af:00.0", -1)),
			pod: cycletest.Pod("p", "1", gpus(2), single), wantReject: "sextant.io/gpu"},
		{name: "single-numa-node: CPU and devices each fit, not together", topo: cycletest.Topology("n", 2, 4, cycletest.GPU("0000:3b:00.0", 0)),
			others: []*v1.Pod{cycletest.On("n", cycletest.Pod("busy", "4", nil, map[string]string{annotations.NUMANodes: "0"}))},
			pod:    cycletest.Pod("p", "1", gpus(1), single), wantReject: "cpu, memory and devices together"},
	} {
		for _, order := range []string{"NUMAAware first", "DeviceAware first"} {
			t.Run(tc.name+"/"+order, func(t *testing.T) {
				ni := cycletest.NodeInfo("n", tc.others...)
				np, dp := bothPlugins(t, []*framework.NodeInfo{ni}, tc.topo)
				pls := []cycletest.Plugin{np, dp}
				if order == "DeviceAware first" {
					pls = []cycletest.Plugin{dp, np}
				}
				r := cycletest.Schedule(t, tc.pod.DeepCopy(), []*framework.NodeInfo{ni}, pls...)
				if tc.wantReject != "" {
					if r.Selected != "" || r.Filter["n"] == nil || !strings.Contains(r.Filter["n"].Message(), tc.wantReject) {
						t.Fatalf("selected %q, filter %v; want the node dropped with %q", r.Selected, r.Filter["n"], tc.wantReject)
					}
					return
				}
				if r.Selected != "n" {
					t.Fatalf("not scheduled: %v", r.Filter)
				}
				nodes, _ := numahint.Reserved(r.State, "n")
				if got := annotations.FormatNUMANodes(nodes); got != tc.wantNUMA {
					t.Errorf("numa.sextant.io/nodes = %q, want %q", got, tc.wantNUMA)
				}
				if got := picked(t, r.State)["sextant.io/gpu"]; strings.Join(got, ",") != strings.Join(tc.wantGPUs, ",") {
					t.Errorf("GPUs = %v, want %v", got, tc.wantGPUs)
				}
			})
		}
	}
}

// TestNUMAAndDevicesThroughFramework runs NUMAAware and DeviceAware through
// kube-scheduler's own framework runtime, in the order the "sextant" profile enables
// them, to check that they cooperate through the CycleState as the runtime really calls
// them (skips, score validation, reserve order, no PreBind), once with SextantBinder (the
// Binding carries the decisions and nothing is patched) and once with DefaultBinder,
// where Reserve fails for a pod with a decision: nothing would carry it to the pod.
func TestNUMAAndDevicesThroughFramework(t *testing.T) {
	for _, binderName := range []string{defaultbinder.Name, binder.Name} {
		t.Run(binderName, func(t *testing.T) { testThroughFramework(t, binderName) })
	}
}

func testThroughFramework(t *testing.T, binderName string) {
	ctx := context.Background()
	schedmetrics.Register() // the runtime instruments plugins with the scheduler's metrics
	topo := cycletest.Topology("node-1", 2, 4,
		cycletest.GPU("0000:3b:00.0", 0), cycletest.GPU("0000:3c:00.0", 0), cycletest.GPU("0000:af:00.0", 1), cycletest.GPU("0000:b0:00.0", 1))
	busy := cycletest.On("node-1", cycletest.Pod("busy", "3", nil, map[string]string{annotations.NUMANodes: "0"}))
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
		return devices.NewWith(store, lookup(h)), nil
	}
	points := []string{"PreFilter", "Filter", "PreScore", "Score", "Reserve"}
	f, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterPluginAsExtensions(binderName, newBinder, binderPoints...),
		tf.RegisterPluginAsExtensions(numa.Name, newNUMA, points...),
		tf.RegisterPluginAsExtensions(devices.Name, newDevices, points...),
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
			name: "CPUs and GPUs", pod: cycletest.Pod("train", "2", map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 2}, nil),
			wantNode: "node-1", wantNUMA: "1", wantDevices: `{"sextant.io/gpu":["0000:af:00.0","0000:b0:00.0"]}`,
		},
		{
			// Both nodes pass; node-1 scores higher (node-2 has no topology). The one CPU
			// left on NUMA node 0 is enough. No devices asked, none written.
			name: "CPUs only", pod: cycletest.Pod("web", "1", nil, nil), wantNode: "node-1", wantNUMA: "0",
		},
		{
			// Neither plugin has anything to say: the framework skips them, nothing written.
			name: "plain pod", pod: cycletest.Pod("plain", "", nil, nil), wantNode: "node-1",
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

// TestPreemptionThroughFramework runs kube-scheduler's own victim selection
// (DefaultPreemption.SelectVictimsOnNode) with NUMAAware and DeviceAware as the
// "sextant" profile wires them (DeviceAware is NUMAAware's device provider), on a node
// whose GPUs the agent publishes holders for: the victims must be found, and as few as
// needed.
func TestPreemptionThroughFramework(t *testing.T) {
	const a, b = "0000:01:00.0", "0000:02:00.0"
	gpus := func(n int64) map[v1alpha1.DeviceKind]int64 { return map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: n} }
	holder := func(name string) v1alpha1.DeviceHolder {
		return v1alpha1.DeviceHolder{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}
	}
	withPriority := func(p *v1.Pod, prio int32) *v1.Pod {
		p.Spec.Priority = &prio
		p.UID = "uid-" + p.UID
		return p
	}
	for _, tc := range []struct {
		name        string
		pods        []*v1.Pod
		holders     map[string]v1alpha1.DeviceHolder // by device address
		preemptor   *v1.Pod
		wantVictims []string
	}{
		{
			name:        "the victim holding both GPUs",
			pods:        []*v1.Pod{withPriority(cycletest.On("n", cycletest.Pod("victim", "1", gpus(2), cycletest.Allocated(v1alpha1.KindGPU, a, b))), 0)},
			holders:     map[string]v1alpha1.DeviceHolder{a: holder("victim"), b: holder("victim")},
			preemptor:   withPriority(cycletest.Pod("p", "1", gpus(2), nil), 100),
			wantVictims: []string{"victim"},
		},
		{
			// Both go in the dry run; the more important one is added back and fits.
			name: "one GPU asked: the less important holder only",
			pods: []*v1.Pod{
				withPriority(cycletest.On("n", cycletest.Pod("low", "", gpus(1), cycletest.Allocated(v1alpha1.KindGPU, a))), 0),
				withPriority(cycletest.On("n", cycletest.Pod("mid", "", gpus(1), cycletest.Allocated(v1alpha1.KindGPU, b))), 10),
			},
			holders:     map[string]v1alpha1.DeviceHolder{a: holder("low"), b: holder("mid")},
			preemptor:   withPriority(cycletest.Pod("p", "1", gpus(1), nil), 100),
			wantVictims: []string{"low"},
		},
		{
			name:        "a pod of another scheduler, known by its holder alone",
			pods:        []*v1.Pod{withPriority(cycletest.On("n", cycletest.Pod("other", "", gpus(2), nil)), 0)},
			holders:     map[string]v1alpha1.DeviceHolder{a: {Namespace: "default", Name: "other"}, b: {Namespace: "default", Name: "other"}},
			preemptor:   withPriority(cycletest.Pod("p", "1", gpus(2), nil), 100),
			wantVictims: []string{"other"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			schedmetrics.Register()
			topo := cycletest.Topology("n", 1, 4, cycletest.GPU(a, 0), cycletest.GPU(b, 0))
			for addr, h := range tc.holders {
				cycletest.WithDevice(topo, addr, heldBy(h))
			}
			nodes := []*v1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n"}}}
			snapshot := cache.NewSnapshot(tc.pods, nodes)
			store := heartbeat.NewFromObjects(topo, &v1alpha1.NodeBandwidth{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
			lookup := func(h fwk.Handle) func(string) (fwk.NodeInfo, error) {
				return func(node string) (fwk.NodeInfo, error) { return h.SnapshotSharedLister().NodeInfos().Get(node) }
			}
			newNUMA := func(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
				return numa.NewWith(store, lookup(h)).WithProfile(h), nil
			}
			newDevices := func(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
				pl := devices.NewWith(store, lookup(h))
				numahint.Default.Register(h, pl)
				return pl, nil
			}
			client := fake.NewClientset()
			informerFactory := informers.NewSharedInformerFactory(client, 0)
			f, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
				tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
				tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
				tf.RegisterPluginAsExtensions(numa.Name, newNUMA, "PreFilter", "Filter"),
				tf.RegisterPluginAsExtensions(devices.Name, newDevices, "PreFilter", "Filter"),
			}, "sextant",
				frameworkruntime.WithSnapshotSharedLister(snapshot),
				frameworkruntime.WithClientSet(client),
				frameworkruntime.WithInformerFactory(informerFactory),
				frameworkruntime.WithPodNominator(internalqueue.NewSchedulingQueue(nil, informerFactory)))
			if err != nil {
				t.Fatal(err)
			}
			pre, err := defaultpreemption.New(ctx, &config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}, f, feature.Features{})
			if err != nil {
				t.Fatal(err)
			}
			state := framework.NewCycleState()
			if _, st, _ := f.RunPreFilterPlugins(ctx, state, tc.preemptor); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			ni, err := snapshot.NodeInfos().Get("n")
			if err != nil {
				t.Fatal(err)
			}
			if st := f.RunFilterPluginsWithNominatedPods(ctx, state, tc.preemptor, ni); st.IsSuccess() {
				t.Fatal("setup: the preemptor fits without preemption")
			}
			// As DryRunPreemption calls it: on copies of the state and the NodeInfo.
			victims, _, st := pre.SelectVictimsOnNode(ctx, state.Clone(), tc.preemptor, ni.Snapshot(), nil)
			if !st.IsSuccess() {
				t.Fatalf("SelectVictimsOnNode: %v; want victims %v", st, tc.wantVictims)
			}
			var got []string
			for _, v := range victims {
				got = append(got, v.Name)
			}
			if !slices.Equal(got, tc.wantVictims) {
				t.Errorf("victims %v, want %v", got, tc.wantVictims)
			}
			// The dry run changed nothing the next cycle reads.
			if st := f.RunFilterPluginsWithNominatedPods(ctx, state, tc.preemptor, ni); st.IsSuccess() {
				t.Errorf("after the dry run the preemptor fits the unchanged node: %s", fmt.Sprint(st))
			}
		})
	}
}
