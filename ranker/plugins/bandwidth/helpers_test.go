package bandwidth

import (
	"context"
	"fmt"
	"k8s.io/client-go/rest"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
)

// now is the fixed clock of every test.
var now = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func init() { registerMetrics() }

// report builds a NodeBandwidth; an empty rate string leaves that direction's capacity
// (and remaining) unknown.
func report(node, ingressRemaining, egressRemaining string, sampled time.Time) *v1alpha1.NodeBandwidth {
	dir := func(rem string) v1alpha1.DirectionBandwidth {
		if rem == "" {
			return v1alpha1.DirectionBandwidth{}
		}
		c, r := resource.MustParse("10G"), resource.MustParse(rem)
		return v1alpha1.DirectionBandwidth{Capacity: &c, Remaining: &r}
	}
	t := metav1.NewTime(sampled)
	return &v1alpha1.NodeBandwidth{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Status: v1alpha1.NodeBandwidthStatus{
			SampleTime: &t,
			Window:     &metav1.Duration{Duration: 60 * time.Second},
			Total:      &v1alpha1.Bandwidth{Ingress: dir(ingressRemaining), Egress: dir(egressRemaining)},
		},
	}
}

func testPlugin(t *testing.T, args Args, reports ...*v1alpha1.NodeBandwidth) *BandwidthAware {
	t.Helper()
	if err := args.Validate(); err != nil {
		t.Fatalf("test args invalid: %v", err)
	}
	return newPlugin(args, reportStore(reports...), func() time.Time { return now })
}

// reportStore holds reports as if each reached the ranker when it was sampled (at now
// when it has no sampleTime): the tests date a report by its sampleTime.
func reportStore(reports ...*v1alpha1.NodeBandwidth) *heartbeat.Store {
	store := heartbeat.NewFromObjects()
	for _, r := range reports {
		received := now
		if r.Status.SampleTime != nil {
			received = r.Status.SampleTime.Time
		}
		store.PutAt(r, received)
	}
	return store
}

func testArgs(mut func(*Args)) Args {
	a := Args{Strategy: annotations.BestFit, IngressWeight: 1, EgressWeight: 1, StaleAfter: metav1.Duration{Duration: time.Minute},
		MinWindow: metav1.Duration{Duration: time.Minute}}
	if mut != nil {
		mut(&a)
	}
	return a
}

var podSeq int

func testPod(podAnnotations map[string]string) *v1.Pod {
	podSeq++
	name := fmt.Sprintf("pod-%d", podSeq)
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "default", UID: types.UID(name), Annotations: podAnnotations,
		CreationTimestamp: metav1.NewTime(now.Add(-time.Minute)),
	}}
}

func nodeInfo(name string) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return ni
}

func nodeInfos(names ...string) []fwk.NodeInfo {
	out := make([]fwk.NodeInfo, len(names))
	for i, n := range names {
		out[i] = nodeInfo(n)
	}
	return out
}

// cycle is the outcome of one simulated scheduling cycle of the plugin alone.
type cycle struct {
	preFilter *fwk.Status
	filtered  map[string]*fwk.Status // nodes Filter rejected
	scores    map[string]int64       // normalized; nil when PreScore skipped
	chosen    string                 // highest score, ties by name; "" if none feasible
}

// schedule runs the plugin's extension points in the framework's order, and Reserve on
// the chosen node when reserve is set.
func schedule(t *testing.T, pl *BandwidthAware, pod *v1.Pod, nodes []string, reserve bool) cycle {
	t.Helper()
	ctx := context.Background()
	state := framework.NewCycleState()
	var c cycle
	_, c.preFilter = pl.PreFilter(ctx, state, pod, nodeInfos(nodes...))
	if !c.preFilter.IsSuccess() && !c.preFilter.IsSkip() {
		return c
	}
	c.filtered = map[string]*fwk.Status{}
	var feasible []string
	for _, n := range nodes {
		if c.preFilter.IsSkip() {
			feasible = append(feasible, n)
			continue
		}
		if st := pl.Filter(ctx, state, pod, nodeInfo(n)); !st.IsSuccess() {
			c.filtered[n] = st
			continue
		}
		feasible = append(feasible, n)
	}
	if len(feasible) == 0 {
		return c
	}
	sort.Strings(feasible)
	if st := pl.PreScore(ctx, state, pod, nodeInfos(feasible...)); st.IsSkip() {
		c.chosen = feasible[0]
	} else {
		if !st.IsSuccess() {
			t.Fatalf("PreScore: %v", st)
		}
		list := make(fwk.NodeScoreList, len(feasible))
		for i, n := range feasible {
			s, st := pl.Score(ctx, state, pod, nodeInfo(n))
			if !st.IsSuccess() {
				t.Fatalf("Score(%s): %v", n, st)
			}
			list[i] = fwk.NodeScore{Name: n, Score: s}
		}
		if st := pl.ScoreExtensions().NormalizeScore(ctx, state, pod, list); !st.IsSuccess() {
			t.Fatalf("NormalizeScore: %v", st)
		}
		c.scores = map[string]int64{}
		best := int64(-1)
		for _, ns := range list {
			if ns.Score < 0 || ns.Score > fwk.MaxNodeScore {
				t.Fatalf("score of %s out of range: %d", ns.Name, ns.Score)
			}
			c.scores[ns.Name] = ns.Score
			if ns.Score > best {
				best, c.chosen = ns.Score, ns.Name
			}
		}
	}
	if reserve && c.chosen != "" {
		if st := pl.Reserve(ctx, state, pod, c.chosen); !st.IsSuccess() {
			t.Fatalf("Reserve: %v", st)
		}
	}
	return c
}
func init() {
	startQuotas = func(context.Context, *rest.Config) (*quotaInformer, error) { return nil, nil }
}
