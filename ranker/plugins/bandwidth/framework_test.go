package bandwidth

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/heartbeat"
)

// TestInFramework builds the plugin through New inside the real scheduling framework,
// with args from a KubeSchedulerConfiguration-style runtime.Unknown, and checks the
// framework honours its Skip and rejection statuses and that the pod informer rebuilds
// the ledger.
func TestInFramework(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	schedmetrics.Register() // the framework instruments plugins with the scheduler's metrics

	store := reportStore(fourNodeReports()...)
	saved := sharedStore
	sharedStore = func(context.Context, *rest.Config) (*heartbeat.Store, error) { return store, nil }
	t.Cleanup(func() { sharedStore = saved })

	bound := testPod(map[string]string{annotations.IngressRequired: "100M"})
	bound.Spec.NodeName = "node-3"
	bound.Spec.SchedulerName = "sextant" // the profile's: reserved before it runs
	client := fake.NewClientset(bound)
	factory := informers.NewSharedInformerFactory(client, 0)

	var pl *BandwidthAware
	capture := func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		p, err := New(ctx, obj, h)
		if err == nil {
			pl = p.(*BandwidthAware)
			pl.now = func() time.Time { return now }
		}
		return p, err
	}
	withArgs := func(_ *frameworkruntime.Registry, profile *config.KubeSchedulerProfile) {
		profile.PluginConfig = append(profile.PluginConfig, config.PluginConfig{
			Name: Name, Args: &runtime.Unknown{Raw: []byte(`{"strategy":"most-headroom"}`), ContentType: runtime.ContentTypeJSON},
		})
	}
	fw, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
		tf.RegisterPluginAsExtensions(Name, capture, "PreFilter", "Filter", "PreScore", "Score", "Reserve"),
		withArgs,
	}, "sextant",
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithKubeConfig(&rest.Config{Host: "test"}),
		frameworkruntime.WithSnapshotSharedLister(schedcache.NewSnapshot(nil, fourNodeObjects())),
	)
	if err != nil {
		t.Fatalf("NewFramework: %v", err)
	}
	if pl.args.Strategy != annotations.MostHeadroom {
		t.Errorf("args not applied: %+v", pl.args)
	}

	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	// The handler's HasSynced turns true a moment after it was given the listed pod:
	// PreFilter refuses bandwidth pods until then.
	deadline := time.Now().Add(5 * time.Second)
	for (pl.Ledger().Len() != 1 || !pl.ledgerSynced()) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if node, ok := pl.Ledger().Has(bound.UID); !ok || node != "node-3" {
		t.Fatalf("bound pod not rebuilt into the ledger from the informer (ok=%v node=%q)", ok, node)
	}

	t.Run("no annotations: skipped", func(t *testing.T) {
		state := framework.NewCycleState()
		pod := testPod(nil)
		if _, st, _ := fw.RunPreFilterPlugins(ctx, state, pod); !st.IsSuccess() {
			t.Fatalf("PreFilter: %v", st)
		}
		if !state.GetSkipFilterPlugins().Has(Name) {
			t.Error("Filter should be skipped")
		}
		if st := fw.RunPreScorePlugins(ctx, state, pod, nodeInfos(fourNodes...)); !st.IsSuccess() {
			t.Fatalf("PreScore: %v", st)
		}
		if !state.GetSkipScorePlugins().Has(Name) {
			t.Error("Score should be skipped")
		}
	})
	t.Run("malformed: unresolvable with the annotation named", func(t *testing.T) {
		pod := testPod(map[string]string{annotations.EgressRequired: "10 gigs"})
		_, st, _ := fw.RunPreFilterPlugins(ctx, framework.NewCycleState(), pod)
		if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), annotations.EgressRequired) {
			t.Fatalf("got %v", st)
		}
	})
	t.Run("four-node example, most-headroom from args", func(t *testing.T) {
		state := framework.NewCycleState()
		pod := testPod(map[string]string{annotations.IngressRequired: "400M", annotations.IngressExpected: "500M"})
		if _, st, _ := fw.RunPreFilterPlugins(ctx, state, pod); !st.IsSuccess() {
			t.Fatalf("PreFilter: %v", st)
		}
		var feasible []fwk.NodeInfo
		for _, n := range fourNodes {
			ni := nodeInfo(n)
			if st := fw.RunFilterPlugins(ctx, state, pod, ni); st.IsSuccess() {
				feasible = append(feasible, ni)
			} else if n != "node-4" {
				t.Errorf("%s filtered: %v", n, st)
			}
		}
		if len(feasible) != 3 {
			t.Fatalf("want 3 feasible nodes, got %d", len(feasible))
		}
		if st := fw.RunPreScorePlugins(ctx, state, pod, feasible); !st.IsSuccess() {
			t.Fatalf("PreScore: %v", st)
		}
		scores, st := fw.RunScorePlugins(ctx, state, pod, feasible)
		if !st.IsSuccess() {
			t.Fatalf("Score: %v", st)
		}
		got := map[string]int64{}
		for _, s := range scores {
			got[s.Name] = s.TotalScore
		}
		// node-3 holds the 100M the rebuilt pod reserved: 600M available.
		if !(got["node-1"] > got["node-3"] && got["node-3"] > got["node-2"]) {
			t.Errorf("want node-1 > node-3 > node-2, got %v", got)
		}
		if st := fw.RunReservePluginsReserve(ctx, state, pod, "node-1"); !st.IsSuccess() {
			t.Fatalf("Reserve: %v", st)
		}
		if in, _ := pl.Ledger().Reserved("node-1"); in != 500e6 {
			t.Errorf("node-1 reserved %s, want 500M", annotations.FormatRate(in))
		}
		fw.RunReservePluginsUnreserve(ctx, state, pod, "node-1")
		if in, _ := pl.Ledger().Reserved("node-1"); in != 0 {
			t.Errorf("node-1 still reserved %s after Unreserve", annotations.FormatRate(in))
		}
	})
}

func fourNodeObjects() []*v1.Node {
	out := make([]*v1.Node, len(fourNodes))
	for i, n := range fourNodes {
		out[i] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
	}
	return out
}
