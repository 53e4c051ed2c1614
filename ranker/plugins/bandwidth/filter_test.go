package bandwidth

import (
	"context"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics/testutil"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
)

// fourNodeReports are the four-node worked example (remaining 900M, 500M, 700M) plus node-4 below the
// floor, with both directions equal so that either direction alone gives the same answer.
func fourNodeReports() []*v1alpha1.NodeBandwidth {
	return []*v1alpha1.NodeBandwidth{
		report("node-1", "900M", "900M", now.Add(-5*time.Second)),
		report("node-2", "500M", "500M", now.Add(-5*time.Second)),
		report("node-3", "700M", "700M", now.Add(-5*time.Second)),
		report("node-4", "300M", "300M", now.Add(-5*time.Second)),
	}
}

var fourNodes = []string{"node-1", "node-2", "node-3", "node-4"}

func TestFilter(t *testing.T) {
	fresh := now.Add(-10 * time.Second)
	reports := []*v1alpha1.NodeBandwidth{
		report("plenty", "9G", "9G", fresh),
		report("tight", "300M", "2G", fresh),
		report("exact", "400M", "400M", fresh),
		report("stale", "9G", "9G", now.Add(-2*time.Minute)),
		report("no-capacity", "", "9G", fresh),
		report("egress-poor", "9G", "100M", fresh),
	}
	noTime := report("no-sample-time", "9G", "9G", fresh)
	noTime.Status.SampleTime = nil
	restarted := report("restarted-agent", "9G", "9G", fresh)
	restarted.Status.Window.Duration = 3 * time.Second
	noWindow := report("no-window", "9G", "9G", fresh)
	noWindow.Status.Window = nil
	reports = append(reports, noTime, restarted, noWindow)
	msgStale := "node(s) had no fresh NodeBandwidth (none received within stale-after 1m0s)"
	msgPartial := "node(s) had only a partial NodeBandwidth (a window shorter than min-window 1m0s: the agent has not measured that long yet)"

	ingress400 := map[string]string{annotations.IngressRequired: "400M", annotations.IngressExpected: "500M"}
	tests := []struct {
		name        string
		annotations map[string]string
		node        string
		wantCode    fwk.Code
		wantReason  string // metric reason label
		wantMsg     string // the status message, fixed per reason
		wantDetail  string // what check says with the node's figures (logged at V(5))
	}{
		{name: "plenty", annotations: ingress400, node: "plenty", wantCode: fwk.Success},
		{name: "exactly the floor passes", annotations: ingress400, node: "exact", wantCode: fwk.Success},
		{name: "below the floor", annotations: ingress400, node: "tight", wantCode: fwk.Unschedulable, wantReason: reasonIngress,
			wantMsg: msgIngress, wantDetail: "ingress remaining 300M < required 400M"},
		{name: "missing report", annotations: ingress400, node: "unknown-node", wantCode: fwk.UnschedulableAndUnresolvable, wantReason: reasonNoReport,
			wantMsg: msgNoReport, wantDetail: "node has no NodeBandwidth"},
		{name: "stale report", annotations: ingress400, node: "stale", wantCode: fwk.UnschedulableAndUnresolvable, wantReason: reasonStaleReport,
			wantMsg: msgStale, wantDetail: "NodeBandwidth is stale (received 2m0s ago, stale after 1m0s)"},
		{name: "report without sampleTime", annotations: ingress400, node: "no-sample-time", wantCode: fwk.UnschedulableAndUnresolvable, wantReason: reasonPartialReport,
			wantMsg: msgPartial, wantDetail: "NodeBandwidth has no sampleTime"},
		{name: "window shorter than min-window", annotations: ingress400, node: "restarted-agent", wantCode: fwk.UnschedulableAndUnresolvable, wantReason: reasonPartialReport,
			wantMsg: msgPartial, wantDetail: "NodeBandwidth is partial (window 3s, min-window 1m0s)"},
		{name: "no window", annotations: ingress400, node: "no-window", wantCode: fwk.UnschedulableAndUnresolvable, wantReason: reasonPartialReport,
			wantMsg: msgPartial, wantDetail: "NodeBandwidth is partial (window 0s, min-window 1m0s)"},
		{name: "unknown capacity", annotations: ingress400, node: "no-capacity", wantCode: fwk.UnschedulableAndUnresolvable, wantReason: reasonUnknownCapacity,
			wantMsg: msgUnknownCapacity, wantDetail: "NodeBandwidth has no ingress remaining (capacity unknown)"},
		{name: "unknown capacity in a direction not required", annotations: map[string]string{annotations.EgressRequired: "1G"}, node: "no-capacity", wantCode: fwk.Success},
		{name: "egress floor", annotations: map[string]string{annotations.IngressRequired: "1G", annotations.EgressRequired: "200M"}, node: "egress-poor", wantCode: fwk.Unschedulable, wantReason: reasonEgress,
			wantMsg: msgEgress, wantDetail: "egress remaining 100M < required 200M"},
		{name: "expected only does not filter", annotations: map[string]string{annotations.IngressExpected: "20G"}, node: "unknown-node", wantCode: fwk.Success},
		{name: "no annotations does not filter", annotations: nil, node: "unknown-node", wantCode: fwk.Success},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl := testPlugin(t, testArgs(nil), reports...)
			pod := testPod(tc.annotations)
			ctx := context.Background()
			state := framework.NewCycleState()
			_, st := pl.PreFilter(ctx, state, pod, nil)
			if st.IsSkip() {
				if tc.wantCode != fwk.Success {
					t.Fatalf("PreFilter skipped, want Filter to say %v", tc.wantCode)
				}
				return
			}
			if !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			var before float64
			if tc.wantReason != "" {
				before, _ = testutil.GetCounterMetricValue(filterRejections.WithLabelValues(tc.wantReason))
			}
			st = pl.Filter(ctx, state, pod, nodeInfo(tc.node))
			if st.Code() != tc.wantCode {
				t.Fatalf("got %v, want %v", st, tc.wantCode)
			}
			if st.Message() != tc.wantMsg {
				t.Errorf("message %q, want %q", st.Message(), tc.wantMsg)
			}
			if detail := checkDetail(pl, pod, tc.node); detail != tc.wantDetail {
				t.Errorf("detail %q, want %q", detail, tc.wantDetail)
			}
			if tc.wantReason != "" {
				after, _ := testutil.GetCounterMetricValue(filterRejections.WithLabelValues(tc.wantReason))
				if after != before+1 {
					t.Errorf("rejections{reason=%s} went %v -> %v, want +1", tc.wantReason, before, after)
				}
			}
		})
	}
}

// TestFilterStrictBestFitWindow: the four-node example under bestFitWindow strict. With
// required 400M and expected 500M the window is |available - 500M| <= 100M:
// only node-2 (500M) is in it; node-1 (900M) and node-3 (700M) are outside, node-4
// (300M) below the floor. most-headroom pods and prefer keep today's answer.
func TestFilterStrictBestFitWindow(t *testing.T) {
	pod := map[string]string{annotations.IngressRequired: "400M", annotations.IngressExpected: "500M"}
	for _, tc := range []struct {
		name         string
		window       BestFitWindow
		strategy     annotations.Strategy
		podStrategy  string
		wantFiltered map[string]string // node -> reason
	}{
		{"strict best-fit", WindowStrict, annotations.BestFit, "",
			map[string]string{"node-1": reasonOutsideWindow, "node-3": reasonOutsideWindow, "node-4": reasonIngress}},
		{"strict, pod asks for best-fit", WindowStrict, annotations.MostHeadroom, "best-fit",
			map[string]string{"node-1": reasonOutsideWindow, "node-3": reasonOutsideWindow, "node-4": reasonIngress}},
		{"strict, most-headroom pod", WindowStrict, annotations.BestFit, "most-headroom", map[string]string{"node-4": reasonIngress}},
		{"prefer best-fit", WindowPrefer, annotations.BestFit, "", map[string]string{"node-4": reasonIngress}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := testPlugin(t, testArgs(func(a *Args) { a.Strategy = tc.strategy; a.BestFitWindow = tc.window }), fourNodeReports()...)
			ann := map[string]string{}
			for k, v := range pod {
				ann[k] = v
			}
			if tc.podStrategy != "" {
				ann[annotations.BandwidthStrategy] = tc.podStrategy
			}
			p := testPod(ann)
			c := schedule(t, pl, p, fourNodes, false)
			if len(c.filtered) != len(tc.wantFiltered) {
				t.Errorf("filtered %v, want %v", c.filtered, tc.wantFiltered)
			}
			for node, reason := range tc.wantFiltered {
				st := c.filtered[node]
				if st == nil {
					t.Errorf("%s not filtered, want %s", node, reason)
					continue
				}
				if want := pl.message(reason, annotations.PodNetwork); st.Message() != want {
					t.Errorf("%s: message %q, want %q", node, st.Message(), want)
				}
			}
			if tc.window == WindowStrict && tc.wantFiltered["node-1"] != "" {
				want := "ingress remaining 900M is 400M from expected 500M, more than expected - required 100M"
				if d := checkDetail(pl, p, "node-1"); d != want {
					t.Errorf("node-1 detail %q, want %q", d, want)
				}
			}
		})
	}
}

func TestAbsDiff(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{
		{900, 500, 400}, {500, 900, 400}, {-100, 500, 600}, {0, 0, 0},
		{math.MinInt64 + 1, math.MaxInt64, math.MaxInt64}, {math.MaxInt64, -1, math.MaxInt64},
	} {
		if got := absDiff(tc.a, tc.b); got != tc.want {
			t.Errorf("absDiff(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestFilterFourNodeExample(t *testing.T) {
	for _, strategy := range []annotations.Strategy{annotations.BestFit, annotations.MostHeadroom} {
		pl := testPlugin(t, testArgs(func(a *Args) { a.Strategy = strategy }), fourNodeReports()...)
		pod := testPod(map[string]string{annotations.IngressRequired: "400M", annotations.IngressExpected: "500M"})
		c := schedule(t, pl, pod, fourNodes, false)
		if len(c.filtered) != 1 || c.filtered["node-4"] == nil {
			t.Fatalf("%s: want only node-4 filtered, got %v", strategy, c.filtered)
		}
		if msg := c.filtered["node-4"].Message(); msg != msgIngress {
			t.Errorf("node-4 reason %q", msg)
		}
		if detail := checkDetail(pl, pod, "node-4"); detail != "ingress remaining 300M < required 400M" {
			t.Errorf("node-4 detail %q", detail)
		}
	}
}

func TestFilterSubtractsReservations(t *testing.T) {
	pl := testPlugin(t, testArgs(nil), report("n", "1G", "1G", now))
	first := testPod(map[string]string{annotations.IngressRequired: "400M", annotations.IngressExpected: "700M"})
	pl.Ledger().Reserve(first, "n", mustParse(t, first))
	second := testPod(map[string]string{annotations.IngressRequired: "400M"})
	st := pl.Filter(context.Background(), nil, second, nodeInfo("n"))
	if st.Code() != fwk.Unschedulable || st.Message() != msgIngress {
		t.Fatalf("got %v, want %q", st, msgIngress)
	}
	want := "ingress remaining 300M (1G reported - 700M reserved) < required 400M"
	if detail := checkDetail(pl, second, "n"); detail != want {
		t.Errorf("detail %q, want %q", detail, want)
	}
}

// checkDetail is what Filter logs at V(5) for pod on node: check's message with the
// node's figures, from the same report and reservations Filter reads.
func checkDetail(pl *BandwidthAware, pod *v1.Pod, node string) string {
	s, ok := pl.podState(nil, pod)
	if !ok {
		return ""
	}
	rec := pl.reports.NodeOf(nodeInfo(node).Node())
	report := rec.Bandwidth()
	var res networkReserved
	if report != nil {
		res = pl.ledger.totalsOn(rec, annotations.PodNetwork)
	}
	_, detail := pl.check(s.req, report, res, s.now, true)
	return detail
}

func mustParse(t *testing.T, pod interface{ GetAnnotations() map[string]string }) annotations.BandwidthRequest {
	t.Helper()
	req, err := annotations.ParseBandwidth(pod.GetAnnotations())
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestPreFilter(t *testing.T) {
	malformed := []struct{ key, value string }{
		{annotations.IngressRequired, "4OOM"},
		{annotations.EgressRequired, "-1"},
		{annotations.IngressExpected, "fast"},
		{annotations.EgressExpected, "1.5.0G"},
		{annotations.BandwidthStrategy, "cheapest"},
		{annotations.BandwidthPrefix + "egress-cap", "1G"},
		{annotations.EgressLimit, "0"},
	}
	for _, m := range malformed {
		t.Run("malformed "+m.key, func(t *testing.T) {
			pl := testPlugin(t, testArgs(nil), fourNodeReports()...)
			pod := testPod(map[string]string{m.key: m.value})
			before, _ := testutil.GetCounterMetricValue(filterRejections.WithLabelValues(reasonInvalidAnnotation))
			_, st := pl.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
			if st.Code() != fwk.UnschedulableAndUnresolvable {
				t.Fatalf("got %v, want UnschedulableAndUnresolvable", st)
			}
			if !strings.Contains(st.Message(), m.key) || !strings.Contains(st.Message(), "want ") {
				t.Errorf("message %q should name %s and the accepted form", st.Message(), m.key)
			}
			after, _ := testutil.GetCounterMetricValue(filterRejections.WithLabelValues(reasonInvalidAnnotation))
			if after != before+1 {
				t.Errorf("invalid_annotation counter went %v -> %v", before, after)
			}
		})
	}
	t.Run("expected below required", func(t *testing.T) {
		pl := testPlugin(t, testArgs(nil))
		pod := testPod(map[string]string{annotations.EgressRequired: "500M", annotations.EgressExpected: "400M"})
		_, st := pl.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
		if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), annotations.EgressExpected) {
			t.Fatalf("got %v", st)
		}
	})
	t.Run("no annotations: skip", func(t *testing.T) {
		pl := testPlugin(t, testArgs(nil))
		pod := testPod(map[string]string{"app": "web"})
		state := framework.NewCycleState()
		if _, st := pl.PreFilter(context.Background(), state, pod, nil); !st.IsSkip() {
			t.Fatalf("got %v, want Skip", st)
		}
		if _, err := state.Read(stateKey); err == nil {
			t.Error("nothing should be written for a pod the plugin ignores")
		}
	})
	t.Run("network alone: success with state, even before the ledger syncs", func(t *testing.T) {
		pl := testPlugin(t, testArgs(nil))
		pl.ledgerSynced = func() bool { return false }
		pod := testPod(map[string]string{annotations.BandwidthNetwork: "storage"})
		state := framework.NewCycleState()
		if _, st := pl.PreFilter(context.Background(), state, pod, nil); !st.IsSuccess() {
			t.Fatalf("got %v, want Success: Filter must keep the pod off nodes without storage", st)
		}
		if _, err := state.Read(stateKey); err != nil {
			t.Error("PreFilter should store the parsed request")
		}
	})
	t.Run("required: success with state", func(t *testing.T) {
		pl := testPlugin(t, testArgs(nil))
		pod := testPod(map[string]string{annotations.IngressRequired: "1M"})
		state := framework.NewCycleState()
		if _, st := pl.PreFilter(context.Background(), state, pod, nil); !st.IsSuccess() {
			t.Fatalf("got %v, want Success", st)
		}
		if _, err := state.Read(stateKey); err != nil {
			t.Error("PreFilter should store the parsed request")
		}
	})
}

// Staleness is on the ranker's clock: an agent whose clock runs an hour ahead does not
// keep its report fresh, nor does one an hour behind age it.
func TestStaleByArrival(t *testing.T) {
	store := heartbeat.NewFromObjects()
	store.PutAt(report("ahead", "9G", "9G", now.Add(time.Hour)), now.Add(-2*time.Minute))
	store.PutAt(report("behind", "9G", "9G", now.Add(-time.Hour)), now.Add(-time.Second))
	pl := newPlugin(testArgs(nil), store, func() time.Time { return now })
	pod := testPod(map[string]string{annotations.IngressRequired: "400M"})
	c := schedule(t, pl, pod, []string{"ahead", "behind"}, false)
	if c.filtered["ahead"] == nil || c.filtered["ahead"].Message() != staleMessage(time.Minute) {
		t.Errorf("a report received 2m ago (sampled 1h ahead): %v, want stale", c.filtered["ahead"])
	}
	if c.filtered["behind"] != nil || c.chosen != "behind" {
		t.Errorf("a report received 1s ago (sampled 1h behind): filtered %v, chosen %q; want it placed there", c.filtered["behind"], c.chosen)
	}
	// Score gives a partial report nothing, as it does a stale one.
	partial := report("partial", "9G", "9G", now)
	partial.Status.Window.Duration = 10 * time.Second
	store.PutAt(partial, now)
	store.PutAt(report("modest", "1G", "1G", now), now)
	expected := testPod(map[string]string{annotations.IngressExpected: "400M", annotations.BandwidthStrategy: "most-headroom"})
	if c := schedule(t, pl, expected, []string{"partial", "modest"}, false); c.chosen != "modest" || c.scores["partial"] != 0 {
		t.Errorf("most-headroom between a partial 9G and a full 1G: chose %q, scores %v; want the full one, the partial scored 0", c.chosen, c.scores)
	}
}

// Filter pairs a node's report with reservations from no earlier than that report. The
// store swaps a report in before the ledger releases the pods it covers; reading the
// report, then reservations already released, would count a pod the report does not
// show yet nowhere. Every consistent state here rejects x, so a Filter that passes it
// read a torn pair.
func TestFilterReadsReportAndReservationsTogether(t *testing.T) {
	started := now.Add(-2 * time.Minute)                                // p runs from here
	before := report("n", "1G", "10G", started.Add(30*time.Second))     // without p's traffic
	covering := report("n", "400M", "10G", started.Add(61*time.Second)) // with it: covers p
	store := reportStore(before)
	pl := newPlugin(testArgs(nil), store, func() time.Time { return now })
	store.AddListener(heartbeat.Listener{Bandwidth: pl.reportArrived})
	p := testPod(map[string]string{annotations.IngressRequired: "600M"})
	reserveP := func() {
		l := pl.ledger
		l.mu.Lock()
		delete(l.covered, p.UID)
		l.addLocked(p.UID, &reservation{pod: "p", node: "n", network: annotations.PodNetwork, ingress: 600_000_000, runningSince: started, bound: true})
		l.mu.Unlock()
	}
	x := testPod(map[string]string{annotations.IngressRequired: "500M"})
	state := framework.NewCycleState()
	if _, st := pl.PreFilter(context.Background(), state, x, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	var stop atomic.Bool
	var passes, runs atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		ni := nodeInfo("n")
		for !stop.Load() {
			runs.Add(1)
			if pl.Filter(context.Background(), state, x, ni).IsSuccess() {
				passes.Add(1)
			}
		}
	}()
	rounds := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); rounds++ {
		reserveP()                 // covering, p reserved: 400M - 600M
		store.PutAt(before, now)   // before, p reserved: 1G - 600M = 400M
		store.PutAt(covering, now) // covering, then p released: 400M
	}
	stop.Store(true)
	<-done
	t.Logf("%d rounds, %d Filter calls", rounds, runs.Load())
	if passes.Load() > 0 {
		t.Errorf("Filter passed x %d times: it read a report with reservations released after a newer one arrived", passes.Load())
	}
}
