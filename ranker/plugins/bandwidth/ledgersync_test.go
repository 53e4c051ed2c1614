package bandwidth

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/requeue"
)

// syncActivations records the pods a plugin activates (fwk.PodActivator).
type syncActivations struct {
	mu   sync.Mutex
	pods []string
}

func (a *syncActivations) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range pods {
		a.pods = append(a.pods, p.Name)
	}
}

func (a *syncActivations) has(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.pods {
		if p == name {
			return true
		}
	}
	return false
}

// kube-scheduler starts scheduling once its own handlers have synced; the ledger's pod
// handler is not among them. Until it has seen every listed pod, a pod that requires
// bandwidth is refused at PreFilter (without preemption), and it is activated once the
// ledger has synced, when Filter sees the bound pod's reservation.
func TestLedgerSyncGate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	schedmetrics.Register()

	store := heartbeat.NewFromObjects()
	store.PutAt(report("n", "1G", "1G", now), now)
	saved := sharedStore
	sharedStore = func(context.Context, *rest.Config) (*heartbeat.Store, error) { return store, nil }
	t.Cleanup(func() { sharedStore = saved })

	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	bound := testPod(map[string]string{annotations.IngressRequired: "800M"})
	bound.Spec.NodeName = "n"
	bound.Spec.SchedulerName = "sextant" // the profile's: reserved before it runs
	// The pod refused while the ledger syncs is in the informer, as every pod the
	// scheduler tries is.
	waiting := testPod(map[string]string{annotations.IngressRequired: "400M"})
	client := fake.NewClientset(node, bound, waiting)
	factory := informers.NewSharedInformerFactory(client, 0)
	activated := &syncActivations{}

	var pl *BandwidthAware
	capture := func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		p, err := New(ctx, obj, h)
		if err == nil {
			pl = p.(*BandwidthAware)
			pl.now = func() time.Time { return now }
		}
		return p, err
	}
	fw, err := tf.NewFramework(ctx, []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
		tf.RegisterPluginAsExtensions(Name, capture, "PreFilter", "Filter", "PostFilter"),
	}, "sextant",
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithKubeConfig(&rest.Config{Host: "test"}),
		frameworkruntime.WithSnapshotSharedLister(schedcache.NewSnapshot(nil, []*v1.Node{node})),
		frameworkruntime.WithPodActivator(activated),
	)
	if err != nil {
		t.Fatalf("NewFramework: %v", err)
	}

	// A ledger handler slower than kube-scheduler's own: held by the ledger's lock
	// until the informer has listed the bound pod. PreFilter must not take that lock.
	pl.ledger.mu.Lock()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	expectedOnly := testPod(map[string]string{annotations.IngressExpected: "400M"})
	var waitingState fwk.CycleState
	for _, c := range []struct {
		name string
		pod  *v1.Pod
		want fwk.Code
	}{
		{"requires bandwidth: refused", waiting, fwk.UnschedulableAndUnresolvable},
		{"expected only: not held", expectedOnly, fwk.Skip},
		{"no annotations: not held", testPod(nil), fwk.Skip},
	} {
		state := framework.NewCycleState()
		_, st, _ := fw.RunPreFilterPlugins(ctx, state, c.pod)
		if c.want == fwk.Skip {
			if !st.IsSuccess() || !state.GetSkipFilterPlugins().Has(Name) {
				t.Errorf("%s: PreFilter = %v, skipped %v; want success and Filter skipped", c.name, st, state.GetSkipFilterPlugins().Has(Name))
			}
			continue
		}
		if st.Code() != c.want || st.Message() != msgLedgerNotSynced {
			t.Errorf("%s: PreFilter before the ledger synced = %v, want %v %q", c.name, st, c.want, msgLedgerNotSynced)
		}
		waitingState = state
		statuses := framework.NewDefaultNodeToStatus()
		statuses.SetAbsentNodesStatus(st)
		fw.RunPostFilterPlugins(ctx, state, c.pod, statuses)
	}
	if waitingState == nil {
		t.Fatal("no pod was refused")
	}
	if activated.has(waiting.Name) {
		t.Error("the refused pod was activated before the ledger synced")
	}
	pl.ledger.mu.Unlock()

	deadline := time.Now().Add(5 * time.Second)
	for !activated.has(waiting.Name) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !activated.has(waiting.Name) {
		t.Fatal("the refused pod was not activated once the ledger synced")
	}
	state := framework.NewCycleState()
	if _, st, _ := fw.RunPreFilterPlugins(ctx, state, waiting); !st.IsSuccess() {
		t.Fatalf("PreFilter after the ledger synced: %v", st)
	}
	if st := fw.RunFilterPlugins(ctx, state, waiting, nodeInfo("n")); st.IsSuccess() {
		t.Error("a 400M pod passes Filter on a node whose 1G is 800M bound")
	}
}

// A pod refused while the ledger synced is activated whichever comes first: the sync
// (activateWhenSynced finds it waiting) or the attempt's PostFilter (it sees the ledger
// synced meanwhile). It is not activated while the ledger has not synced.
func TestLedgerSyncActivates(t *testing.T) {
	for _, c := range []struct {
		name          string
		syncedAtStart bool // synced before PostFilter runs
		syncLater     bool // synced after PostFilter
		want          bool
	}{
		{"synced during the attempt", true, false, true},
		{"synced after the attempt", false, true, true},
		{"never synced", false, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pl := testPlugin(t, testArgs(nil), report("n", "1G", "1G", now))
			activated := &syncActivations{}
			pl.waiting = requeue.New(Name, activated.Activate)
			pl.nodes = func() ([]fwk.NodeInfo, error) { return nodeInfos("n"), nil }
			var mu sync.Mutex
			synced := false
			pl.ledgerSynced = func() bool { mu.Lock(); defer mu.Unlock(); return synced }
			setSynced := func() { mu.Lock(); synced = true; mu.Unlock() }

			pod := testPod(map[string]string{annotations.IngressRequired: "400M"})
			state := framework.NewCycleState()
			_, st := pl.PreFilter(ctx, state, pod, nil)
			if st.Code() != fwk.UnschedulableAndUnresolvable {
				t.Fatalf("PreFilter = %v, want refused", st)
			}
			done := make(chan struct{})
			go func() { pl.activateWhenSynced(ctx); close(done) }()
			if c.syncedAtStart {
				setSynced()
				<-done // the sync's activation ran before the pod was waiting
			}
			statuses := framework.NewDefaultNodeToStatus()
			statuses.SetAbsentNodesStatus(st.WithPlugin(Name))
			pl.PostFilter(ctx, state, pod, statuses)
			if c.syncLater {
				setSynced()
			} else if !c.syncedAtStart {
				cancel()
			}
			<-done
			if got := activated.has(pod.Name); got != c.want {
				t.Errorf("activated %v, want %v", got, c.want)
			}
		})
	}
}
