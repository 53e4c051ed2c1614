package numa

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/requeue"
	"sextant.io/sextant/ranker/plugins/silence"
)

// silentPlugin is NUMAAware over one node n of two NUMA nodes (2 CPUs, 4Gi each) whose
// NodeTopology says it pins and whose last NodeBandwidth reached the ranker heard
// before now (never: none), with the plugin's clock at now.
func silentPlugin(t *testing.T, now time.Time, heard time.Duration, pinning v1alpha1.NUMAPinning) (*NUMAAware, *heartbeat.Store, *framework.NodeInfo) {
	t.Helper()
	topo := uniform("n", 2, 2, 4*gi)
	topo.Status.NUMAPinning = pinning
	store := heartbeat.NewFromObjects(topo)
	if heard != never {
		store.PutAt(report("n"), now.Add(-heard))
	}
	ni := nodeInfo("n")
	pl := NewWith(store, func(string) (fwk.NodeInfo, error) { return ni, nil })
	pl.now = func() time.Time { return now }
	return pl, store, ni
}

// never stands for a node whose agent never wrote a NodeBandwidth.
const never = time.Duration(-1)

func report(node string) *v1alpha1.NodeBandwidth {
	return &v1alpha1.NodeBandwidth{ObjectMeta: metav1.ObjectMeta{Name: node}}
}

// TestFilterSilentAgent: a node whose agent has not been heard from (no NodeBandwidth,
// or one that arrived more than silence.After ago, on the ranker's clock) gets no NUMA
// decision, whatever its NodeTopology's numaPinning says: a single-numa-node pod is
// rejected there as on DeviceAware's silent nodes (UnschedulableAndUnresolvable,
// reason silent_agent), even where the floor would have skipped Filter; a pod without
// the policy may be placed there, without numa.sextant.io/nodes and without a
// reservation, as on a node that does not pin, and is counted among the undecided
// placements by the reason.
func TestFilterSilentAgent(t *testing.T) {
	now := time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)
	single := map[string]string{annotations.NUMAPolicy: string(annotations.PolicySingleNUMANode)}
	for _, tc := range []struct {
		name    string
		heard   time.Duration // how long before now the last report arrived; never: none
		pinning v1alpha1.NUMAPinning
		policy  map[string]string
		// wantCode and wantMsg are Filter's answer; wantStaged what Reserve stages.
		wantCode   fwk.Code
		wantMsg    string
		wantStaged string
	}{
		{name: "heard just now, single-numa-node", heard: 0, pinning: v1alpha1.PinningActive, policy: single, wantStaged: "0"},
		{name: "heard within the bound, single-numa-node", heard: silence.After - time.Second, pinning: v1alpha1.PinningActive,
			policy: single, wantStaged: "0"},
		{name: "silent past the bound, single-numa-node", heard: silence.After + time.Second, pinning: v1alpha1.PinningActive,
			policy: single, wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: msgSilentAgent},
		{name: "never heard, single-numa-node", heard: never, pinning: v1alpha1.PinningActive, policy: single,
			wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: msgSilentAgent},
		{name: "silent and not pinning: silence is the reason", heard: silence.After + time.Second, pinning: v1alpha1.PinningOff,
			policy: single, wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: msgSilentAgent},
		{name: "heard, not pinning", heard: 0, pinning: v1alpha1.PinningOff, policy: single,
			wantCode: fwk.Unschedulable, wantMsg: msgNoPinning},
		{name: "heard just now, no policy", heard: 0, pinning: v1alpha1.PinningActive, wantStaged: "0"},
		{name: "silent past the bound, no policy: placed, not pinned", heard: silence.After + time.Second, pinning: v1alpha1.PinningActive},
		{name: "never heard, no policy: placed, not pinned", heard: never, pinning: v1alpha1.PinningActive},
		{name: "heard, not pinning, no policy: placed, not pinned", heard: 0, pinning: v1alpha1.PinningOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, _, ni := silentPlugin(t, now, tc.heard, tc.pinning)
			counter := filterRejections.WithLabelValues(silence.Reason)
			before, _ := testutil.GetCounterMetricValue(counter)
			p := pod("p", "1", gi, tc.policy)
			r := schedule(t, pl, p, []*framework.NodeInfo{ni})
			st := r.filter["n"]
			if st.Code() != tc.wantCode || st.Message() != tc.wantMsg {
				t.Fatalf("Filter = %v, want %v %q", st, tc.wantCode, tc.wantMsg)
			}
			after, _ := testutil.GetCounterMetricValue(counter)
			if wantInc := tc.wantMsg == msgSilentAgent; (after == before+1) != wantInc {
				t.Errorf("%s rejections went %v -> %v, want +1: %v", silence.Reason, before, after, wantInc)
			}
			if tc.wantCode != fwk.Success {
				return
			}
			// A placement without a decision is counted by why the agent would not carry
			// one out; one with a decision is not counted.
			undecidedBefore := map[string]float64{}
			for _, reason := range []string{silence.Reason, reasonNoPinning} {
				undecidedBefore[reason], _ = testutil.GetCounterMetricValue(undecided.WithLabelValues(reason))
			}
			if st := pl.Reserve(context.Background(), r.state, p, "n"); !st.IsSuccess() {
				t.Fatalf("Reserve: %v", st)
			}
			wantReason := ""
			switch {
			case tc.wantStaged != "":
			case tc.heard == never || tc.heard > silence.After:
				wantReason = silence.Reason
			default:
				wantReason = reasonNoPinning
			}
			for reason, before := range undecidedBefore {
				after, _ := testutil.GetCounterMetricValue(undecided.WithLabelValues(reason))
				if want := b2f(reason == wantReason); after-before != want {
					t.Errorf("undecided placements (%s) went %v -> %v, want +%v", reason, before, after, want)
				}
			}
			if got := binder.Staged(r.state)[annotations.NUMANodes]; got != tc.wantStaged {
				t.Errorf("staged %s=%q, want %q", annotations.NUMANodes, got, tc.wantStaged)
			}
			if _, held := pl.ledger.Get(p.UID, "n"); held != (tc.wantStaged != "") {
				t.Errorf("reservation held: %v, want %v", held, tc.wantStaged != "")
			}
		})
	}
	if want := "node(s) had no agent heartbeat (NodeBandwidth) within the last " + silence.After.String() + ":"; !strings.HasPrefix(msgSilentAgent, want) {
		t.Errorf("msgSilentAgent %q does not name silence.After (%q)", msgSilentAgent, want)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TestReserveRefusesANodeThatFellSilent: the floor, computed while the agent was heard,
// lets a single-numa-node pod skip Filter; the agent falls silent before the floor is
// recomputed. Reserve refuses the node and voids the floor, so the retry runs Filter,
// which rejects the node as silent.
func TestReserveRefusesANodeThatFellSilent(t *testing.T) {
	start := time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)
	pl, _, ni := silentPlugin(t, start, silence.After-time.Second, v1alpha1.PinningActive)
	// One snapshot list throughout: the floor is kept per list.
	nodes := []fwk.NodeInfo{ni}
	p := pod("p", "1", gi, map[string]string{annotations.NUMAPolicy: string(annotations.PolicySingleNUMANode)})
	ctx := context.Background()
	if _, st := pl.PreFilter(ctx, newState(), p, nodes); st.Code() != fwk.Skip {
		t.Fatalf("setup: PreFilter = %v, want Filter skipped by the floor while the agent is heard", st)
	}
	pl.now = func() time.Time { return start.Add(2 * time.Second) } // within floorRefresh
	state := newState()
	if _, st := pl.PreFilter(ctx, state, p, nodes); st.Code() != fwk.Skip {
		t.Fatalf("setup: PreFilter = %v, want the floor still standing", st)
	}
	st := pl.Reserve(ctx, state, p, "n")
	if st.Code() != fwk.Unschedulable || st.Message() != msgSilentAgent {
		t.Fatalf("Reserve = %v, want Unschedulable %q", st, msgSilentAgent)
	}
	if got, ok := binder.Staged(state)[annotations.NUMANodes]; ok {
		t.Errorf("staged %s=%q for a silent node", annotations.NUMANodes, got)
	}
	// The floor is void: the retry (past floorRetry) runs Filter, which names the silence.
	pl.now = func() time.Time { return start.Add(2*time.Second + floorRetry) }
	state = newState()
	if _, st := pl.PreFilter(ctx, state, p, nodes); !st.IsSuccess() {
		t.Fatalf("retry: PreFilter = %v, want Filter to run", st)
	}
	if got := pl.Filter(ctx, state, p, ni); got.Code() != fwk.UnschedulableAndUnresolvable || got.Message() != msgSilentAgent {
		t.Errorf("retry: Filter = %v, want the silent node rejected", got)
	}
}

// TestSilentAgentHeardAgainWakesPods: a single-numa-node pod rejected because the
// node's agent was silent comes back when the agent's NodeBandwidth arrives again with
// its NodeTopology rewritten unchanged (as after an agent restart or an API-server
// outage), whether the report comes once the pod waits (the store's listener) or
// during its attempt (PostFilter). A report that leaves the node silent does not, nor
// does a report from a node whose rejection was not its silence.
func TestSilentAgentHeardAgainWakesPods(t *testing.T) {
	now := time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		heard   time.Duration
		pinning v1alpha1.NUMAPinning
		wantMsg string
		// arrived is how long before now the new report reached the ranker.
		arrived time.Duration
		// duringAttempt: the report arrives between Filter and PostFilter.
		duringAttempt bool
		wantActivated int
	}{
		{name: "silent, heard again", heard: 3 * time.Minute, pinning: v1alpha1.PinningActive, wantMsg: msgSilentAgent, wantActivated: 1},
		{name: "silent, heard again during the attempt", heard: 3 * time.Minute, pinning: v1alpha1.PinningActive,
			wantMsg: msgSilentAgent, duringAttempt: true, wantActivated: 1},
		{name: "never heard, first report", heard: never, pinning: v1alpha1.PinningActive, wantMsg: msgSilentAgent, wantActivated: 1},
		{name: "silent, a report still too old", heard: 3 * time.Minute, pinning: v1alpha1.PinningActive, wantMsg: msgSilentAgent,
			arrived: silence.After + time.Second},
		{name: "heard, not pinning", heard: 10 * time.Second, pinning: v1alpha1.PinningOff, wantMsg: msgNoPinning},
		{name: "heard, not pinning, report during the attempt", heard: 10 * time.Second, pinning: v1alpha1.PinningOff,
			wantMsg: msgNoPinning, duringAttempt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, store, ni := silentPlugin(t, now, tc.heard, tc.pinning)
			var activated []string
			pl.waiting = requeue.New(Name, func(_ klog.Logger, pods map[string]*v1.Pod) {
				for _, p := range pods {
					activated = append(activated, p.Name)
				}
			})
			pl.snapshot = func() ([]fwk.NodeInfo, error) { return []fwk.NodeInfo{ni}, nil }
			store.AddListener(pl.listener())

			p := pod("p", "1", gi, map[string]string{annotations.NUMAPolicy: string(annotations.PolicySingleNUMANode)})
			state := newState()
			if _, st := pl.PreFilter(context.Background(), state, p, nil); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			st := pl.Filter(context.Background(), state, p, ni)
			if st.Message() != tc.wantMsg {
				t.Fatalf("Filter = %v, want %q", st, tc.wantMsg)
			}
			statuses := framework.NewDefaultNodeToStatus()
			statuses.Set("n", st.WithPlugin(Name))
			// The agent writes its NodeBandwidth and rewrites its NodeTopology unchanged,
			// which the store tells no one of.
			arrive := func() {
				store.PutAt(report("n"), now.Add(-tc.arrived))
				topo := uniform("n", 2, 2, 4*gi)
				topo.Status.NUMAPinning = tc.pinning
				store.PutAt(topo, now)
			}
			if tc.duringAttempt {
				arrive()
			}
			pl.PostFilter(context.Background(), state, p, statuses)
			if !tc.duringAttempt {
				if pl.waiting.Len() != 1 {
					t.Fatalf("after PostFilter %d pods wait, want 1", pl.waiting.Len())
				}
				arrive()
			}
			if len(activated) != tc.wantActivated {
				t.Errorf("activated %v, want %d pod(s); %d still waiting", activated, tc.wantActivated, pl.waiting.Len())
			}
		})
	}
}

// The silence bound and reason are DeviceAware's: one rule for both plugins.
func TestSilenceSharedWithDeviceAware(t *testing.T) {
	if got := fmt.Sprint(silence.After); got != "2m0s" {
		t.Errorf("silence.After = %s; msgSilentAgent says 2m0s", got)
	}
	if silence.Reason != "silent_agent" {
		t.Errorf("silence.Reason = %q, want silent_agent (docs/operations.md, dashboards)", silence.Reason)
	}
}
