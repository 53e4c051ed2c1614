package numa

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/numahint"
)

// The two-node example: a pod asking 2 CPUs and 4 GiB; node-1 has NUMA nodes of 2 CPUs and
// 4 GiB, node-2 of 1 CPU and 2 GiB. Both can hold the pod; node-1 needs one NUMA node,
// node-2 two, so node-1 wins and the pod gets one NUMA node.
func TestTwoNodeExample(t *testing.T) {
	infos := []*framework.NodeInfo{nodeInfo("node-1"), nodeInfo("node-2")}
	pl, client := newPlugin(t, infos, uniform("node-1", 32, 2, 4*gi), uniform("node-2", 64, 1, 2*gi))
	p := pod("two-node", "2", 4*gi, nil)
	if _, err := client.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := schedule(t, pl, p, infos)
	if !r.filter["node-1"].IsSuccess() || !r.filter["node-2"].IsSuccess() {
		t.Fatalf("both nodes must pass Filter: %v", r.filter)
	}
	if r.selected != "node-1" || r.scores["node-1"] <= r.scores["node-2"] {
		t.Fatalf("selected %s with scores %v; want node-1 ranked first", r.selected, r.scores)
	}
	if r.scores["node-1"] != fwk.MaxNodeScore {
		t.Errorf("node-1 score = %d, want %d", r.scores["node-1"], fwk.MaxNodeScore)
	}
	nodes, ok := numahint.Chosen(r.state, infos[0])
	if !ok || len(nodes) != 1 {
		t.Fatalf("chosen NUMA nodes on node-1 = %v, %v; want exactly one", nodes, ok)
	}
	if n2, _ := numahint.Chosen(r.state, infos[1]); len(n2) != 2 {
		t.Errorf("node-2 would need %v, want two NUMA nodes", n2)
	}
	ctx := context.Background()
	if st := pl.Reserve(ctx, r.state, p, "node-1"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	if v := binder.Staged(r.state)[annotations.NUMANodes]; v != "0" {
		t.Errorf("staged %s = %q, want \"0\"", annotations.NUMANodes, v)
	}
}

func TestFilter(t *testing.T) {
	twoByTwo := uniform("n", 2, 2, 4*gi)
	for _, tc := range []struct {
		name       string
		topo       *v1alpha1.NodeTopology
		pods       []*v1.Pod
		pod        *v1.Pod
		wantPre    fwk.Code
		wantCode   fwk.Code
		wantReason string
		wantNodes  string
	}{
		{name: "no requests: skipped", topo: twoByTwo, pod: pod("p", "", 0, nil), wantPre: fwk.Skip},
		{name: "no topology: passes", pod: pod("p", "2", 4*gi, nil)},
		{
			name: "no topology, single-numa-node: unresolvable", pod: pod("p", "2", 4*gi, map[string]string{annotations.NUMAPolicy: "single-numa-node"}),
			wantCode: fwk.UnschedulableAndUnresolvable, wantReason: "no NodeTopology",
		},
		{name: "fits one", topo: twoByTwo, pod: pod("p", "2", 4*gi, nil), wantNodes: "0"},
		{name: "needs both", topo: twoByTwo, pod: pod("p", "3", 4*gi, nil), wantNodes: "0,1"},
		{
			name: "single-numa-node, fits one", topo: twoByTwo, wantNodes: "0",
			pod: pod("p", "2", 4*gi, map[string]string{annotations.NUMAPolicy: "single-numa-node"}),
		},
		{
			name: "single-numa-node, needs two", topo: twoByTwo,
			pod:      pod("p", "3", 4*gi, map[string]string{annotations.NUMAPolicy: "single-numa-node"}),
			wantCode: fwk.Unschedulable, wantReason: "single-numa-node",
		},
		{
			name: "single-numa-node, NUMA node 0 taken: 1 is chosen", topo: twoByTwo, wantNodes: "1",
			pods: []*v1.Pod{on("n", pod("a", "2", 4*gi, map[string]string{annotations.NUMANodes: "0"}))},
			pod:  pod("p", "2", 4*gi, map[string]string{annotations.NUMAPolicy: "single-numa-node"}),
		},
		{
			name: "half of each taken: fits only across both", topo: twoByTwo, wantNodes: "0,1",
			pods: []*v1.Pod{on("n", pod("a", "2", 4*gi, map[string]string{annotations.NUMANodes: "0,1"}))},
			pod:  pod("p", "2", 4*gi, nil),
		},
		{
			name: "does not fit all NUMA nodes together", topo: twoByTwo,
			pod: pod("p", "5", gi, nil), wantCode: fwk.Unschedulable, wantReason: "enough free cpu in their NUMA nodes",
		},
		{
			name: "malformed policy: unresolvable, names annotation and form", topo: twoByTwo,
			pod:     pod("p", "1", gi, map[string]string{annotations.NUMAPolicy: "single"}),
			wantPre: fwk.UnschedulableAndUnresolvable, wantReason: annotations.NUMAPolicy,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ni := nodeInfo("n", tc.pods...)
			var topos []*v1alpha1.NodeTopology
			if tc.topo != nil {
				topos = append(topos, tc.topo)
			}
			pl, _ := newPlugin(t, []*framework.NodeInfo{ni}, topos...)
			ctx := context.Background()
			state := newState()
			_, st := pl.PreFilter(ctx, state, tc.pod, nil)
			if st.Code() != tc.wantPre {
				t.Fatalf("PreFilter = %v, want %v", st, tc.wantPre)
			}
			if tc.wantPre == fwk.UnschedulableAndUnresolvable {
				if !strings.Contains(st.Message(), tc.wantReason) || !strings.Contains(st.Message(), "single-numa-node") {
					t.Errorf("PreFilter message %q must name %s and the accepted form", st.Message(), tc.wantReason)
				}
				return
			}
			if tc.wantPre == fwk.Skip {
				return
			}
			st = pl.Filter(ctx, state, tc.pod, ni)
			if st.Code() != tc.wantCode {
				t.Fatalf("Filter = %v, want %v", st, tc.wantCode)
			}
			if tc.wantReason != "" && !strings.Contains(st.Message(), tc.wantReason) {
				t.Errorf("Filter message %q, want it to mention %q", st.Message(), tc.wantReason)
			}
			nodes, ok := numahint.Chosen(state, ni)
			if got := annotations.FormatNUMANodes(nodes); ok && got != tc.wantNodes || !ok && tc.wantNodes != "" {
				t.Errorf("chosen = %q (%v), want %q", got, ok, tc.wantNodes)
			}
		})
	}
}

func TestScoreRanking(t *testing.T) {
	// Distances: "near" has 11 between its NUMA nodes, "far" 31.
	near := topology("near", numaSpec{2, 4 * gi, []int32{10, 11}}, numaSpec{2, 4 * gi, []int32{11, 10}})
	far := topology("far", numaSpec{2, 4 * gi, []int32{10, 31}}, numaSpec{2, 4 * gi, []int32{31, 10}})
	single := uniform("single", 1, 4, 8*gi)
	for _, tc := range []struct {
		name  string
		topos []*v1alpha1.NodeTopology
		nodes []string
		pod   *v1.Pod
		want  []string // best first
	}{
		{
			name: "fewest NUMA nodes wins", topos: []*v1alpha1.NodeTopology{near, single},
			nodes: []string{"near", "single"}, pod: pod("p", "3", 4*gi, nil), want: []string{"single", "near"},
		},
		{
			name: "same count: smaller distance wins", topos: []*v1alpha1.NodeTopology{near, far},
			nodes: []string{"far", "near"}, pod: pod("p", "3", 4*gi, nil), want: []string{"near", "far"},
		},
		{
			name: "no topology scores lowest", topos: []*v1alpha1.NodeTopology{far},
			nodes: []string{"bare", "far"}, pod: pod("p", "3", 4*gi, nil), want: []string{"far", "bare"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var infos []*framework.NodeInfo
			for _, n := range tc.nodes {
				infos = append(infos, nodeInfo(n))
			}
			pl, _ := newPlugin(t, infos, tc.topos...)
			r := schedule(t, pl, tc.pod, infos)
			for i := 1; i < len(tc.want); i++ {
				if r.scores[tc.want[i-1]] <= r.scores[tc.want[i]] {
					t.Errorf("scores %v: want %s above %s", r.scores, tc.want[i-1], tc.want[i])
				}
			}
			if r.scores[tc.want[0]] != fwk.MaxNodeScore {
				t.Errorf("best node %s scored %d, want %d", tc.want[0], r.scores[tc.want[0]], fwk.MaxNodeScore)
			}
		})
	}
}

func TestNormalizeScores(t *testing.T) {
	scores := fwk.NodeScoreList{
		{Name: "k1", Score: encode(Choice{Nodes: []int32{0}})},
		{Name: "k2near", Score: encode(Choice{Nodes: []int32{0, 1}, Distance: 11})},
		{Name: "k2far", Score: encode(Choice{Nodes: []int32{0, 1}, Distance: 31})},
		{Name: "k3", Score: encode(Choice{Nodes: []int32{0, 1, 2}, Distance: 60})},
		{Name: "none", Score: 0},
	}
	NormalizeScores(scores)
	got := map[string]int64{}
	for _, s := range scores {
		got[s.Name] = s.Score
	}
	if !(got["k1"] == 100 && got["k1"] > got["k2near"] && got["k2near"] > got["k2far"] && got["k2far"] > got["k3"] && got["k3"] > got["none"] && got["none"] == 0) {
		t.Errorf("normalized scores %v not ordered k1 > k2near > k2far > k3 > none", got)
	}
}

func TestReserveUnreserve(t *testing.T) {
	ni := nodeInfo("n")
	pl, _ := newPlugin(t, []*framework.NodeInfo{ni}, uniform("n", 2, 2, 4*gi))
	ctx := context.Background()
	first := pod("first", "2", 4*gi, map[string]string{annotations.NUMAPolicy: "single-numa-node"})
	r := schedule(t, pl, first, []*framework.NodeInfo{ni})
	if st := pl.Reserve(ctx, r.state, first, "n"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	// The scheduler cache holds the assumed pod without the annotation: the reservation
	// must count it on the NUMA node it was given.
	ni.AddPod(on("n", first.DeepCopy()))

	second := pod("second", "2", 4*gi, map[string]string{annotations.NUMAPolicy: "single-numa-node"})
	r2 := schedule(t, pl, second, []*framework.NodeInfo{ni})
	if nodes, _ := numahint.Chosen(r2.state, ni); annotations.FormatNUMANodes(nodes) != "1" {
		t.Fatalf("second pod got NUMA nodes %v, want 1 (0 is reserved)", nodes)
	}
	if st := pl.Reserve(ctx, r2.state, second, "n"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	ni.AddPod(on("n", second.DeepCopy()))

	third := pod("third", "2", 4*gi, map[string]string{annotations.NUMAPolicy: "single-numa-node"})
	if r3 := schedule(t, pl, third, []*framework.NodeInfo{ni}); r3.filter["n"].Code() != fwk.Unschedulable {
		t.Fatalf("third pod on a full node: Filter = %v, want Unschedulable", r3.filter["n"])
	}
	pl.Unreserve(ctx, r2.state, second, "n")
	pl.Unreserve(ctx, r2.state, second, "n") // idempotent
	if _, held := pl.ledger.Get(second.UID, "n"); held {
		t.Fatal("Unreserve left the reservation in the ledger")
	}
	// As the scheduler does right after Unreserve: forget the assumed pod.
	if err := ni.RemovePod(klog.Background(), on("n", second.DeepCopy())); err != nil {
		t.Fatal(err)
	}
	if r3 := schedule(t, pl, third, []*framework.NodeInfo{ni}); !r3.filter["n"].IsSuccess() {
		t.Fatalf("after Unreserve: Filter = %v, want success", r3.filter["n"])
	}
}

// Reserve must choose on its own when Filter and Score did not run on this state for the
// node (one feasible node, or a node hint from opportunistic batching).
func TestReserveWithoutFilter(t *testing.T) {
	ni := nodeInfo("n", on("n", pod("a", "2", 4*gi, map[string]string{annotations.NUMANodes: "0"})))
	pl, client := newPlugin(t, []*framework.NodeInfo{ni}, uniform("n", 2, 2, 4*gi))
	ctx := context.Background()
	p := pod("p", "1", gi, nil)
	if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	state := newState()
	if _, st := pl.PreFilter(ctx, state, p, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	if st := pl.Reserve(ctx, state, p, "n"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	if nodes, _ := numahint.Reserved(state, "n"); annotations.FormatNUMANodes(nodes) != "1" {
		t.Errorf("chosen %v, want 1", nodes)
	}
	// No topology for "missing": nothing to reserve, which is success.
	if st := pl.Reserve(ctx, state, p, "missing"); !st.IsSuccess() {
		t.Errorf("Reserve on a node without topology = %v, want success", st)
	}
}

// TestReserveStagesForTheBinding: Reserve stages numa.sextant.io/nodes for
// SextantBinder's Binding, the only way it reaches the pod; without a SextantBinder in
// the profile it fails rather than decide something no node would carry out.
func TestReserveStagesForTheBinding(t *testing.T) {
	for _, tc := range []struct {
		name      string
		topo      bool
		pod       *v1.Pod
		noBinder  bool
		wantCode  fwk.Code
		wantValue string // staged; "" = nothing staged
	}{
		{name: "stages the chosen nodes", topo: true, pod: pod("p", "3", gi, nil), wantValue: "0,1"},
		{name: "one NUMA node", topo: true, pod: pod("p", "1", gi, nil), wantValue: "0"},
		{name: "no CPU or memory asked: nothing", topo: true, pod: pod("p", "", 0, nil)},
		{name: "no topology: nothing", pod: pod("p", "1", gi, nil)},
		{name: "no SextantBinder: an error", topo: true, pod: pod("p", "1", gi, nil), noBinder: true, wantCode: fwk.Error},
		{name: "no SextantBinder, nothing to decide: fine", pod: pod("p", "1", gi, nil), noBinder: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ni := nodeInfo("n")
			var topos []*v1alpha1.NodeTopology
			if tc.topo {
				topos = append(topos, uniform("n", 2, 2, 4*gi))
			}
			pl, _ := newPlugin(t, []*framework.NodeInfo{ni}, topos...)
			ctx := context.Background()
			r := schedule(t, pl, tc.pod, []*framework.NodeInfo{ni})
			state := r.state
			if tc.noBinder {
				state = framework.NewCycleState()
				if _, st := pl.PreFilter(ctx, state, tc.pod, []fwk.NodeInfo{ni}); !st.IsSuccess() && !st.IsSkip() {
					t.Fatalf("PreFilter: %v", st)
				}
			}
			st := pl.Reserve(ctx, state, tc.pod, "n")
			if st.Code() != tc.wantCode {
				t.Fatalf("Reserve = %v, want %v", st, tc.wantCode)
			}
			if tc.wantCode == fwk.Error {
				if !strings.Contains(st.Message(), "SextantBinder") {
					t.Errorf("message %q does not name SextantBinder", st.Message())
				}
				return
			}
			if got := binder.Staged(state)[annotations.NUMANodes]; got != tc.wantValue {
				t.Errorf("staged %s=%q, want %q", annotations.NUMANodes, got, tc.wantValue)
			}
		})
	}
}

// The choice remembered with a node's free capacity belongs to one request: another
// pod's cycle on the same, unchanged node must get its own.
func TestChoiceMemoIsPerRequest(t *testing.T) {
	ni := nodeInfo("n", on("n", pod("a", "1", gi, map[string]string{annotations.NUMANodes: "0"})))
	pl, _ := newPlugin(t, []*framework.NodeInfo{ni}, uniform("n", 2, 2, 4*gi))
	ctx := context.Background()
	rec := pl.nodes.Node("n")
	first := pl.free(rec, rec.Topology(), ni)
	for _, tc := range []struct {
		pod  *v1.Pod
		want string
	}{
		{pod("small", "1", gi, nil), "0"},     // fits beside "a"
		{pod("medium", "2", 2*gi, nil), "1"},  // only NUMA node 1 has 2 CPUs free
		{pod("large", "3", 4*gi, nil), "0,1"}, // needs both
		{pod("small-again", "1", gi, nil), "0"},
	} {
		state := newState()
		if _, st := pl.PreFilter(ctx, state, tc.pod, nil); !st.IsSuccess() {
			t.Fatalf("%s: PreFilter: %v", tc.pod.Name, st)
		}
		if st := pl.Filter(ctx, state, tc.pod, ni); !st.IsSuccess() {
			t.Fatalf("%s: Filter: %v", tc.pod.Name, st)
		}
		if nodes, _ := numahint.Chosen(state, ni); annotations.FormatNUMANodes(nodes) != tc.want {
			t.Errorf("%s: chosen %v, want %s", tc.pod.Name, nodes, tc.want)
		}
	}
	if pl.free(rec, rec.Topology(), ni) != first {
		t.Error("the unchanged node's free capacity was computed again")
	}
}

// PreScore skips Score only when every node Filter passed fits the pod in one NUMA node,
// where all scores would be equal.
func TestPreScoreSkipsEqualScores(t *testing.T) {
	for _, tc := range []struct {
		name     string
		topos    []*v1alpha1.NodeTopology
		nodes    []string
		pod      *v1.Pod
		wantSkip bool
	}{
		{name: "one NUMA node everywhere", topos: []*v1alpha1.NodeTopology{uniform("a", 2, 4, 8*gi), uniform("b", 4, 2, 4*gi)},
			nodes: []string{"a", "b"}, pod: pod("p", "2", 2*gi, nil), wantSkip: true},
		{name: "one node needs two", topos: []*v1alpha1.NodeTopology{uniform("a", 2, 4, 8*gi), uniform("b", 4, 2, 4*gi)},
			nodes: []string{"a", "b"}, pod: pod("p", "3", 2*gi, nil)},
		{name: "a node without topology", topos: []*v1alpha1.NodeTopology{uniform("a", 2, 4, 8*gi)},
			nodes: []string{"a", "bare"}, pod: pod("p", "1", gi, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var infos []*framework.NodeInfo
			for _, n := range tc.nodes {
				infos = append(infos, nodeInfo(n))
			}
			pl, _ := newPlugin(t, infos, tc.topos...)
			ctx := context.Background()
			state := newState()
			if _, st := pl.PreFilter(ctx, state, tc.pod, nil); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			var feasible []fwk.NodeInfo
			for _, ni := range infos {
				if st := pl.Filter(ctx, state, tc.pod, ni); !st.IsSuccess() {
					t.Fatalf("Filter(%s): %v", ni.Node().Name, st)
				}
				feasible = append(feasible, ni)
			}
			if st := pl.PreScore(ctx, state, tc.pod, feasible); (st.Code() == fwk.Skip) != tc.wantSkip {
				t.Errorf("PreScore = %v, want skip %v", st, tc.wantSkip)
			}
		})
	}
}

// TestNodesThatDoNotPin: a node whose agent does not pin (NodeTopology's numaPinning
// Off or KubeletStaticCPUManager) is dropped for a single-numa-node pod, even when the
// floor would have skipped Filter, and gets no numa.sextant.io/nodes for other pods;
// Pending and an agent that predates the field count as pinning.
func TestNodesThatDoNotPin(t *testing.T) {
	single := map[string]string{annotations.NUMAPolicy: "single-numa-node"}
	for _, tc := range []struct {
		pinning    v1alpha1.NUMAPinning
		policy     map[string]string
		wantFilter fwk.Code
		wantStaged string
	}{
		{pinning: v1alpha1.PinningOff, policy: single, wantFilter: fwk.Unschedulable},
		{pinning: v1alpha1.PinningKubeletStaticCPUManager, policy: single, wantFilter: fwk.Unschedulable},
		{pinning: v1alpha1.PinningOff},
		{pinning: v1alpha1.PinningKubeletStaticCPUManager},
		{pinning: v1alpha1.PinningKubeletStaticMemoryManager, policy: single, wantFilter: fwk.Unschedulable},
		{pinning: v1alpha1.PinningUnknown, policy: single, wantFilter: fwk.Unschedulable},
		{pinning: v1alpha1.PinningActive, policy: single, wantStaged: "0"},
		{pinning: v1alpha1.PinningPending, policy: single, wantStaged: "0"},
		{pinning: "", policy: single, wantStaged: "0"},
		{pinning: v1alpha1.PinningActive, wantStaged: "0"},
	} {
		name := fmt.Sprintf("%q, policy %v", tc.pinning, tc.policy != nil)
		t.Run(name, func(t *testing.T) {
			topo := uniform("n", 2, 2, 4*gi)
			topo.Status.NUMAPinning = tc.pinning
			ni := nodeInfo("n")
			pl, _ := newPlugin(t, []*framework.NodeInfo{ni}, topo)
			p := pod("p", "1", gi, tc.policy)
			r := schedule(t, pl, p, []*framework.NodeInfo{ni})
			if tc.policy != nil && tc.wantFilter == fwk.Success && r.prefilt.Code() != fwk.Skip {
				t.Errorf("PreFilter = %v, want Filter skipped by the floor (the test must reach the floor)", r.prefilt)
			}
			if got := r.filter["n"].Code(); got != tc.wantFilter {
				t.Fatalf("Filter = %v, want %v", r.filter["n"], tc.wantFilter)
			}
			if tc.wantFilter != fwk.Success {
				if msg := r.filter["n"].Message(); !strings.Contains(msg, "do not pin") {
					t.Errorf("Filter message %q, want it to say the node does not pin", msg)
				}
				return
			}
			if st := pl.Reserve(context.Background(), r.state, p, "n"); !st.IsSuccess() {
				t.Fatalf("Reserve: %v", st)
			}
			if got := binder.Staged(r.state)[annotations.NUMANodes]; got != tc.wantStaged {
				t.Errorf("staged %s=%q, want %q", annotations.NUMANodes, got, tc.wantStaged)
			}
			if _, held := pl.ledger.Get(p.UID, "n"); held != (tc.wantStaged != "") {
				t.Errorf("reservation held: %v, want %v", held, tc.wantStaged != "")
			}
			if nodes, ok := numahint.Chosen(r.state, ni); !ok || annotations.FormatNUMANodes(nodes) != "0" {
				t.Errorf("chosen %v (%v), want NUMA node 0 still chosen for the pod's devices", nodes, ok)
			}
		})
	}
}
