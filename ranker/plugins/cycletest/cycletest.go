// Package cycletest runs scheduling cycles of sextant's plugins in unit tests, the way
// kube-scheduler's framework runs them, without a scheduler.
package cycletest

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/ranker/plugins/binder"
)

// NewState is a cycle's state with SextantBinder's staging area open, as its PreFilter
// leaves it in a profile that binds with it.
func NewState() *framework.CycleState {
	s := framework.NewCycleState()
	binder.Open(s)
	return s
}

// Plugin is what one cycle of Schedule runs of each plugin.
type Plugin interface {
	fwk.PreFilterPlugin
	fwk.FilterPlugin
	fwk.PreScorePlugin
	fwk.ScorePlugin
	fwk.ReservePlugin
}

// Result is what a cycle decided: each plugin's scores by node, the first rejection per
// node, the node the pod was reserved on (empty: none fit) and the cycle's state.
type Result struct {
	State    fwk.CycleState
	Filter   map[string]*fwk.Status // first rejection per node
	Scores   map[string]map[string]int64
	Selected string
}

// Schedule runs one cycle of the given plugins, in order, the way the framework does,
// and reserves the pod on the best node (sum of scores, ties by name).
func Schedule(t testing.TB, p *v1.Pod, infos []*framework.NodeInfo, pls ...Plugin) Result {
	t.Helper()
	ctx := context.Background()
	r := Result{State: NewState(), Filter: map[string]*fwk.Status{}, Scores: map[string]map[string]int64{}}
	skipFilter := map[string]bool{}
	for _, pl := range pls {
		_, st := pl.PreFilter(ctx, r.State, p, nil)
		switch st.Code() {
		case fwk.Success:
		case fwk.Skip:
			skipFilter[pl.Name()] = true
		default:
			t.Fatalf("%s PreFilter: %v", pl.Name(), st)
		}
	}
	var feasible []fwk.NodeInfo
	for _, ni := range infos {
		ok := true
		for _, pl := range pls {
			if skipFilter[pl.Name()] {
				continue
			}
			if st := pl.Filter(ctx, r.State, p, ni); !st.IsSuccess() {
				r.Filter[ni.Node().Name] = st
				ok = false
				break
			}
		}
		if ok {
			feasible = append(feasible, ni)
		}
	}
	if len(feasible) == 0 {
		return r
	}
	total := map[string]int64{}
	for _, pl := range pls {
		if !pl.PreScore(ctx, r.State, p, feasible).IsSuccess() {
			continue
		}
		var list fwk.NodeScoreList
		for _, ni := range feasible {
			s, st := pl.Score(ctx, r.State, p, ni)
			if !st.IsSuccess() {
				t.Fatalf("%s Score: %v", pl.Name(), st)
			}
			list = append(list, fwk.NodeScore{Name: ni.Node().Name, Score: s})
		}
		if ext := pl.ScoreExtensions(); ext != nil {
			if st := ext.NormalizeScore(ctx, r.State, p, list); !st.IsSuccess() {
				t.Fatalf("%s NormalizeScore: %v", pl.Name(), st)
			}
		}
		r.Scores[pl.Name()] = map[string]int64{}
		for _, s := range list {
			r.Scores[pl.Name()][s.Name] = s.Score
			total[s.Name] += s.Score
		}
	}
	for _, ni := range feasible {
		n := ni.Node().Name
		if r.Selected == "" || total[n] > total[r.Selected] || total[n] == total[r.Selected] && n < r.Selected {
			r.Selected = n
		}
	}
	for _, pl := range pls {
		if st := pl.Reserve(ctx, r.State, p, r.Selected); !st.IsSuccess() {
			t.Fatalf("%s Reserve: %v", pl.Name(), st)
		}
	}
	return r
}
