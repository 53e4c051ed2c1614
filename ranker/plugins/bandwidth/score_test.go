package bandwidth

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

func TestScoreFourNodeExample(t *testing.T) {
	examplePod := map[string]string{annotations.IngressRequired: "400M", annotations.IngressExpected: "500M"}
	bothDirections := map[string]string{
		annotations.IngressRequired: "400M", annotations.IngressExpected: "500M",
		annotations.EgressRequired: "400M", annotations.EgressExpected: "500M",
	}
	tests := []struct {
		name        string
		args        Args
		annotations map[string]string
		wantChosen  string
		wantOrder   []string // by score, highest first
		wantScores  map[string]int64
	}{
		{
			name: "best-fit from args", args: testArgs(nil), annotations: examplePod,
			wantChosen: "node-2", wantOrder: []string{"node-2", "node-3", "node-1"},
			// |remaining - 500M| = 400M, 0, 200M against the worst 400M.
			wantScores: map[string]int64{"node-1": 0, "node-2": 100, "node-3": 50},
		},
		{
			name: "most-headroom from args", args: testArgs(func(a *Args) { a.Strategy = annotations.MostHeadroom }), annotations: examplePod,
			wantChosen: "node-1", wantOrder: []string{"node-1", "node-3", "node-2"},
			wantScores: map[string]int64{"node-1": 100, "node-2": 56, "node-3": 78},
		},
		{
			name: "most-headroom from the annotation overrides best-fit args", args: testArgs(nil),
			annotations: map[string]string{annotations.IngressRequired: "400M", annotations.IngressExpected: "500M", annotations.BandwidthStrategy: "most-headroom"},
			wantChosen:  "node-1", wantOrder: []string{"node-1", "node-3", "node-2"},
		},
		{
			name: "best-fit from the annotation overrides most-headroom args", args: testArgs(func(a *Args) { a.Strategy = annotations.MostHeadroom }),
			annotations: map[string]string{annotations.IngressRequired: "400M", annotations.IngressExpected: "500M", annotations.BandwidthStrategy: "best-fit"},
			wantChosen:  "node-2", wantOrder: []string{"node-2", "node-3", "node-1"},
		},
		{
			name: "both directions, best-fit", args: testArgs(nil), annotations: bothDirections,
			wantChosen: "node-2", wantOrder: []string{"node-2", "node-3", "node-1"},
		},
		{
			name: "both directions, most-headroom", args: testArgs(func(a *Args) { a.Strategy = annotations.MostHeadroom }), annotations: bothDirections,
			wantChosen: "node-1", wantOrder: []string{"node-1", "node-3", "node-2"},
		},
		{
			name: "required only is the target", args: testArgs(nil), annotations: map[string]string{annotations.IngressRequired: "500M"},
			wantChosen: "node-2", wantOrder: []string{"node-2", "node-3", "node-1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl := testPlugin(t, tc.args, fourNodeReports()...)
			c := schedule(t, pl, testPod(tc.annotations), fourNodes, false)
			if c.chosen != tc.wantChosen {
				t.Errorf("chosen %q, want %q (scores %v)", c.chosen, tc.wantChosen, c.scores)
			}
			if _, in := c.scores["node-4"]; in {
				t.Error("node-4 was filtered and must not be scored")
			}
			for i := 1; i < len(tc.wantOrder); i++ {
				a, b := tc.wantOrder[i-1], tc.wantOrder[i]
				if c.scores[a] <= c.scores[b] {
					t.Errorf("want %s (%d) above %s (%d)", a, c.scores[a], b, c.scores[b])
				}
			}
			for n, want := range tc.wantScores {
				if c.scores[n] != want {
					t.Errorf("score of %s = %d, want %d", n, c.scores[n], want)
				}
			}
		})
	}
}

func TestScoreWeightsFlipDecision(t *testing.T) {
	fresh := now.Add(-time.Second)
	// node-a fits the pod's ingress exactly but has a poor egress fit; node-b the reverse.
	reports := []*v1alpha1.NodeBandwidth{
		report("node-a", "500M", "3G", fresh),
		report("node-b", "3G", "500M", fresh),
	}
	pod := map[string]string{
		annotations.IngressRequired: "400M", annotations.IngressExpected: "500M",
		annotations.EgressRequired: "400M", annotations.EgressExpected: "500M",
	}
	for _, tc := range []struct {
		strategy        annotations.Strategy
		ingress, egress int64
		want            string
	}{
		{annotations.BestFit, 3, 1, "node-a"},
		{annotations.BestFit, 1, 3, "node-b"},
		{annotations.BestFit, 1, 0, "node-a"},
		{annotations.BestFit, 0, 1, "node-b"},
		// most-headroom prefers the node with more room in the heavier direction.
		{annotations.MostHeadroom, 3, 1, "node-b"},
		{annotations.MostHeadroom, 1, 3, "node-a"},
	} {
		pl := testPlugin(t, testArgs(func(a *Args) { a.Strategy, a.IngressWeight, a.EgressWeight = tc.strategy, tc.ingress, tc.egress }), reports...)
		c := schedule(t, pl, testPod(pod), []string{"node-a", "node-b"}, false)
		if c.chosen != tc.want {
			t.Errorf("%s ingress=%d egress=%d: chosen %s, want %s (scores %v)", tc.strategy, tc.ingress, tc.egress, c.chosen, tc.want, c.scores)
		}
	}
}

func TestScoreIgnoresPodsWithoutAnnotations(t *testing.T) {
	pl := testPlugin(t, testArgs(nil), fourNodeReports()...)
	pod := testPod(map[string]string{"app": "web"})
	state := framework.NewCycleState()
	ctx := context.Background()
	if st := pl.PreScore(ctx, state, pod, nodeInfos(fourNodes...)); !st.IsSkip() {
		t.Fatalf("PreScore: got %v, want Skip", st)
	}
	// Even if the framework called Score anyway, it must not prefer any node.
	for _, n := range fourNodes {
		if s, st := pl.Score(ctx, state, pod, nodeInfo(n)); s != 0 || !st.IsSuccess() {
			t.Errorf("Score(%s) = %d, %v; want 0, success", n, s, st)
		}
	}
	// And the full cycle neither filters nor reserves.
	c := schedule(t, pl, pod, fourNodes, true)
	if len(c.filtered) != 0 || c.scores != nil {
		t.Errorf("pod without annotations was filtered or scored: %+v", c)
	}
	if pl.Ledger().Len() != 0 {
		t.Error("pod without annotations reserved bandwidth")
	}
}

func TestScoreStrategyOnlyAnnotationSkips(t *testing.T) {
	pl := testPlugin(t, testArgs(nil), fourNodeReports()...)
	pod := testPod(map[string]string{annotations.BandwidthStrategy: "most-headroom"})
	c := schedule(t, pl, pod, fourNodes, true)
	if !c.preFilter.IsSkip() || c.scores != nil || pl.Ledger().Len() != 0 {
		t.Errorf("a strategy without rates should change nothing: %+v", c)
	}
}

func TestScoreExpectedOnlyNodesWithoutReportScoreZero(t *testing.T) {
	pl := testPlugin(t, testArgs(nil), report("reported", "1G", "1G", now))
	pod := testPod(map[string]string{annotations.IngressExpected: "1G"})
	c := schedule(t, pl, pod, []string{"reported", "silent"}, false)
	if c.chosen != "reported" || c.scores["silent"] != 0 || c.scores["reported"] != fwk.MaxNodeScore {
		t.Errorf("got %+v", c)
	}
}

func TestAvailEncoding(t *testing.T) {
	const tbit = 1_000_000_000_000
	tests := []struct {
		name            string
		ingress, egress avail
		wantIn, wantEg  avail
	}{
		{name: "no reports", ingress: avail{}, egress: avail{}},
		{name: "one direction unknown",
			ingress: avail{bits: 400_000_000, ok: true}, egress: avail{},
			wantIn: avail{bits: 400_000_000, ok: true}},
		{name: "zero is a rate, not a missing report",
			ingress: avail{ok: true}, egress: avail{bits: 10_000_000_000, ok: true},
			wantIn: avail{ok: true}, wantEg: avail{bits: 10_000_000_000, ok: true}},
		{name: "reservations beyond the report",
			ingress: avail{bits: -2_500_000_000, ok: true}, egress: avail{bits: -1, ok: true},
			wantIn: avail{bits: -2_500_000_000, ok: true}, wantEg: avail{ok: true}},
		{name: "kbit/s precision",
			ingress: avail{bits: 123_456_789, ok: true}, egress: avail{bits: 999, ok: true},
			wantIn: avail{bits: 123_456_000, ok: true}, wantEg: avail{ok: true}},
		{name: "clamped at the field's range",
			ingress: avail{bits: 10 * tbit, ok: true}, egress: avail{bits: -10 * tbit, ok: true},
			wantIn: avail{bits: availMax * availUnit, ok: true}, wantEg: avail{bits: availMin * availUnit, ok: true}},
		{name: "largest and smallest exact",
			ingress: avail{bits: availMax * availUnit, ok: true}, egress: avail{bits: availMin * availUnit, ok: true},
			wantIn: avail{bits: availMax * availUnit, ok: true}, wantEg: avail{bits: availMin * availUnit, ok: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, eg := decodeAvail(encodeAvail(tt.ingress, tt.egress))
			if in != tt.wantIn || eg != tt.wantEg {
				t.Errorf("decodeAvail(encodeAvail(%+v, %+v)) = %+v, %+v; want %+v, %+v",
					tt.ingress, tt.egress, in, eg, tt.wantIn, tt.wantEg)
			}
		})
	}
	if availMax*availUnit < 3*tbit || availMin*availUnit > -tbit {
		t.Errorf("the field covers %d to %d bit/s; want at least -1 to +3 Tbit/s", availMin*availUnit, availMax*availUnit)
	}
}

func TestStretch(t *testing.T) {
	list := fwk.NodeScoreList{{Name: "a", Score: 40}, {Name: "b", Score: 20}, {Name: "c", Score: 0}}
	stretch(list)
	if list[0].Score != 100 || list[1].Score != 50 || list[2].Score != 0 {
		t.Errorf("got %v", list)
	}
	zero := fwk.NodeScoreList{{Name: "a"}, {Name: "b"}}
	stretch(zero)
	if zero[0].Score != 0 || zero[1].Score != 0 {
		t.Errorf("all-zero scores must stay zero: %v", zero)
	}
}

// Without PreScore's state (the pod was skipped) NormalizeScore prefers no node, whatever
// Score returned.
func TestNormalizeScoreWithoutPreScore(t *testing.T) {
	pl := testPlugin(t, testArgs(nil))
	list := fwk.NodeScoreList{{Name: "a", Score: 3}, {Name: "b", Score: 0}}
	if st := pl.NormalizeScore(context.Background(), framework.NewCycleState(), nil, list); !st.IsSuccess() {
		t.Fatalf("NormalizeScore: %v", st)
	}
	if list[0].Score != 0 || list[1].Score != 0 {
		t.Errorf("got %v, want all 0", list)
	}
}

// NormalizeScore runs once per pod over every feasible node (~500 at 5000 nodes): it
// scores them in place, without allocating.
func TestNormalizeScoreAllocatesNothing(t *testing.T) {
	for _, strategy := range []annotations.Strategy{annotations.BestFit, annotations.MostHeadroom} {
		pl := testPlugin(t, testArgs(func(a *Args) { a.Strategy = strategy }))
		state := framework.NewCycleState()
		state.Write(scoreKey, &scoreState{req: annotations.BandwidthRequest{
			Ingress: annotations.Direction{Required: 400e6, HasRequired: true},
			Egress:  annotations.Direction{Expected: 1e9, HasExpected: true},
		}})
		raw := make(fwk.NodeScoreList, 500)
		for i := range raw {
			raw[i].Score = encodeAvail(avail{bits: int64(i) * 20e6, ok: true}, avail{bits: int64(500-i) * 20e6, ok: i%7 != 0})
		}
		list := make(fwk.NodeScoreList, len(raw))
		allocs := testing.AllocsPerRun(20, func() {
			copy(list, raw)
			pl.NormalizeScore(context.Background(), state, nil, list)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per NormalizeScore, want 0", strategy, allocs)
		}
		var top int64
		for _, s := range list {
			top = max(top, s.Score)
		}
		if top != fwk.MaxNodeScore {
			t.Errorf("%s: best score %d, want %d", strategy, top, fwk.MaxNodeScore)
		}
	}
}

// TestNormalizeScoreLogsTopNodes: at -v=4 each pod's best nodes are logged with what
// they had available and their score per direction, the four-node example here.
func TestNormalizeScoreLogsTopNodes(t *testing.T) {
	pl := testPlugin(t, testArgs(nil))
	state := framework.NewCycleState()
	state.Write(scoreKey, &scoreState{req: annotations.BandwidthRequest{
		Ingress: annotations.Direction{Required: 400e6, HasRequired: true, Expected: 500e6, HasExpected: true},
	}})
	list := fwk.NodeScoreList{
		{Name: "node-1", Score: encodeAvail(avail{bits: 900e6, ok: true}, avail{})},
		{Name: "node-2", Score: encodeAvail(avail{bits: 500e6, ok: true}, avail{})},
		{Name: "node-3", Score: encodeAvail(avail{bits: 700e6, ok: true}, avail{})},
		{Name: "node-5", Score: encodeAvail(avail{}, avail{})},
	}
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 4})
	ctx := klog.NewContext(context.Background(), logger)
	if st := pl.NormalizeScore(ctx, state, testPod(nil), list); !st.IsSuccess() {
		t.Fatal(st)
	}
	want := []string{
		`"rank"=1 "node"="node-2" "score"=100 "strategy"="best-fit" "ingressAvailable"="500M" "ingressScore"=100 "ingressWeight"=1 "egressAvailable"="no report" "egressScore"=-1`,
		`"rank"=2 "node"="node-3" "score"=50 "strategy"="best-fit" "ingressAvailable"="700M" "ingressScore"=50`,
		`"rank"=3 "node"="node-1" "score"=0 "strategy"="best-fit" "ingressAvailable"="900M" "ingressScore"=0`,
	}
	if len(lines) != len(want) {
		t.Fatalf("logged %d lines, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d:\n%s\nwant it to contain\n%s", i+1, lines[i], w)
		}
	}

	// Below -v=4 nothing is logged.
	lines = nil
	quiet := klog.NewContext(context.Background(), funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 3}))
	pl.NormalizeScore(quiet, state, testPod(nil), list)
	if len(lines) != 0 {
		t.Errorf("logged at -v=3: %v", lines)
	}
}
