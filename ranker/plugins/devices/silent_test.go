package devices

import (
	"context"
	"testing"
	"time"

	"sextant.io/sextant/ranker/plugins/cycletest"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/requeue"
	"sextant.io/sextant/ranker/plugins/silence"
)

// TestSilentAgentHeardAgainWakesPods: a pod rejected because a node's agent was silent
// comes back when the agent's NodeBandwidth arrives again with its NodeTopology
// rewritten unchanged (as after an API-server outage), whether the report comes once
// the pod waits (the store's listener) or during its attempt (PostFilter). A report
// that leaves the node silent, or one from a node that was never silent, does not.
func TestSilentAgentHeardAgainWakesPods(t *testing.T) {
	now := time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)
	const never = -1
	for _, tc := range []struct {
		name  string
		heard time.Duration // how long before now the last report arrived; never: none
		gpus  int64         // the node has one
		// wantMsg is Filter's rejection.
		wantMsg string
		// arrived is how long before now the new report reached the ranker.
		arrived time.Duration
		// duringAttempt: the report arrives between Filter and PostFilter.
		duringAttempt bool
		wantActivated int
	}{
		{name: "silent, heard again", heard: 3 * time.Minute, gpus: 1, wantMsg: msgSilentAgent, wantActivated: 1},
		{name: "silent, heard again during the attempt", heard: 3 * time.Minute, gpus: 1, wantMsg: msgSilentAgent,
			duringAttempt: true, wantActivated: 1},
		{name: "never heard, first report", heard: never, gpus: 1, wantMsg: msgSilentAgent, wantActivated: 1},
		{name: "never heard, first report during the attempt", heard: never, gpus: 1, wantMsg: msgSilentAgent,
			duringAttempt: true, wantActivated: 1},
		{name: "silent, a report still too old", heard: 3 * time.Minute, gpus: 1, wantMsg: msgSilentAgent,
			arrived: silence.After + time.Second},
		{name: "heard, too few devices", heard: 10 * time.Second, gpus: 2, wantMsg: msgInsufficient(v1alpha1.KindGPU)},
		{name: "heard, too few devices, report during the attempt", heard: 10 * time.Second, gpus: 2,
			wantMsg: msgInsufficient(v1alpha1.KindGPU), duringAttempt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := func() *v1alpha1.NodeTopology { return cycletest.Topology("n", 1, 4, cycletest.GPU("0000:01:00.0", 0)) }
			report := func() *v1alpha1.NodeBandwidth {
				return &v1alpha1.NodeBandwidth{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
			}
			store := heartbeat.NewFromObjects(topo())
			if tc.heard != never {
				store.PutAt(report(), now.Add(-tc.heard))
			}
			ni := cycletest.NodeInfo("n")
			dp := NewWith(store, func(string) (fwk.NodeInfo, error) { return ni, nil })
			dp.now = func() time.Time { return now }
			var activated []string
			dp.waiting = requeue.New(Name, func(_ klog.Logger, pods map[string]*v1.Pod) {
				for _, p := range pods {
					activated = append(activated, p.Name)
				}
			})
			dp.snapshot = func() ([]fwk.NodeInfo, error) { return []fwk.NodeInfo{ni}, nil }
			store.AddListener(dp.listener())

			state := cycletest.NewState()
			p := cycletest.Pod("p", "", map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: tc.gpus}, nil)
			if _, st := dp.PreFilter(context.Background(), state, p, nil); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			st := dp.Filter(context.Background(), state, p, ni)
			if st.Message() != tc.wantMsg {
				t.Fatalf("Filter = %v, want %q", st, tc.wantMsg)
			}
			statuses := framework.NewDefaultNodeToStatus()
			statuses.Set("n", st.WithPlugin(Name))
			// The agent writes its NodeBandwidth and rewrites its NodeTopology unchanged,
			// which the store tells no one of.
			arrive := func() {
				store.PutAt(report(), now.Add(-tc.arrived))
				store.PutAt(topo(), now)
			}
			if tc.duringAttempt {
				arrive()
			}
			dp.PostFilter(context.Background(), state, p, statuses)
			if !tc.duringAttempt {
				if dp.waiting.Len() != 1 {
					t.Fatalf("after PostFilter %d pods wait, want 1", dp.waiting.Len())
				}
				arrive()
			}
			if len(activated) != tc.wantActivated {
				t.Errorf("activated %v, want %d cycletest.Pod(s); %d still waiting", activated, tc.wantActivated, dp.waiting.Len())
			}
		})
	}
}
