package bandwidth

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/nodelookup"
	"sextant.io/sextant/ranker/plugins/requeue"
)

// Name is the plugin's name in KubeSchedulerConfiguration.
const Name = "BandwidthAware"

// BandwidthAware is the plugin.
type BandwidthAware struct {
	args    Args
	reports nodelookup.Nodes
	ledger  *Ledger
	now     func() time.Time
	// msgStale and msgPartial are Filter's messages for a stale and a partial report;
	// they name args.StaleAfter and args.MinWindow.
	msgStale, msgPartial string
	// waiting are the pods Filter rejected, brought back by the reports that admit
	// them (reportArrived); nodes lists the scheduler's snapshot for PostFilter. Both
	// are nil without a framework Handle.
	waiting *requeue.Waiting
	nodes   func() ([]fwk.NodeInfo, error)
	// ledgerSynced reports whether the ledger's pod handler has been given every pod
	// the informer listed at start; nil (no framework Handle) counts as synced.
	// kube-scheduler's WaitForHandlersSync waits for its own handlers only.
	ledgerSynced cache.InformerSynced
	// events records why a pod's claim was reduced or released; nil without a
	// framework Handle.
	events events.EventRecorder
	// quotas are the namespaces' BandwidthQuotas; nil: none.
	quotas Quotas
	// scheduling is set once this replica ran a scheduling cycle, which only the
	// leader does: standbys keep their ledgers too, but do not repeat its Events.
	scheduling atomic.Bool

	// floorOn says the plugin hears of every report change, which a floor needs
	// (floor.go); floor is the current one, floorBuilding the one being computed,
	// floorTried when PreFilter last computed one.
	floorOn       bool
	floor         atomic.Pointer[floor]
	floorBuilding atomic.Pointer[floorBuild]
	floorTried    time.Time
}

var (
	_ fwk.PreFilterPlugin   = &BandwidthAware{}
	_ fwk.FilterPlugin      = &BandwidthAware{}
	_ fwk.PreScorePlugin    = &BandwidthAware{}
	_ fwk.ScorePlugin       = &BandwidthAware{}
	_ fwk.ScoreExtensions   = &BandwidthAware{}
	_ fwk.ReservePlugin     = &BandwidthAware{}
	_ fwk.PostFilterPlugin  = &BandwidthAware{}
	_ fwk.EnqueueExtensions = &BandwidthAware{}
	_ fwk.SignPlugin        = &BandwidthAware{}

	_ frameworkruntime.PluginFactory = New
)

// New is the plugin factory: app.WithPlugin(bandwidth.Name, bandwidth.New).
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	registerMetrics()
	store, err := sharedStore(ctx, h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("%s heartbeat store: %w", Name, err)
	}
	registerStaleReports(store, args.StaleAfter.Duration)
	pl := newPlugin(args, store, time.Now)
	profile := h.ProfileName()
	pl.ledger.SetOurs(func(pod *v1.Pod) bool { return pod.Spec.SchedulerName == profile })
	pl.waiting = requeue.New(Name, h.Activate)
	pl.nodes = h.SnapshotSharedLister().NodeInfos().List
	pl.events = h.EventRecorder()
	quotas, err := startQuotas(ctx, h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if quotas != nil {
		pl.quotas = quotas
		if _, err := quotas.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: pl.quotaChanged, UpdateFunc: func(_, obj any) { pl.quotaChanged(obj) }, DeleteFunc: pl.quotaChanged,
		}); err != nil {
			return nil, fmt.Errorf("%s watch BandwidthQuotas: %w", Name, err)
		}
		go pl.writeQuotaStatus(ctx, quotas)
	}
	pl.ledger.OnStage(pl.claimsChanged)
	go pl.sweepDeadlines(ctx)
	store.AddListener(heartbeat.Listener{Bandwidth: pl.reportArrived})
	// The scheduler's pod informer lists every pod when it starts, which rebuilds the
	// ledger from bound pods after a restart or leader change.
	pods := h.SharedInformerFactory().Core().V1().Pods().Informer()
	reg, err := pods.AddEventHandler(pl.ledger.podHandler())
	if err != nil {
		return nil, fmt.Errorf("%s watch pods: %w", Name, err)
	}
	if err := pl.waiting.WatchPods(pods); err != nil {
		return nil, fmt.Errorf("%s watch pods: %w", Name, err)
	}
	// As the heartbeat store does with its own handlers: the handler's registration,
	// not the informer, says when the ledger has seen every listed pod.
	pl.ledgerSynced = reg.HasSynced
	go pl.activateWhenSynced(ctx)
	return pl, nil
}

// ledgerReady reports whether the ledger holds every pod bound when the ranker started,
// so that Filter can trust its reservations.
func (pl *BandwidthAware) ledgerReady() bool {
	return pl.ledgerSynced == nil || pl.ledgerSynced()
}

// activateWhenSynced brings back the pods PreFilter refused while the ledger was being
// rebuilt: no cluster event kube-scheduler watches marks that moment. Every waiting pod
// is activated, as which of them waited for the ledger is not recorded; a pod waiting
// for a report costs one more attempt, once per process.
func (pl *BandwidthAware) activateWhenSynced(ctx context.Context) {
	if !cache.WaitForNamedCacheSync(Name+" ledger", ctx.Done(), pl.ledgerSynced) {
		return
	}
	pl.waiting.Activate(klog.FromContext(ctx), func(*v1.Pod) bool { return true })
}

// sharedStore is heartbeat.Shared; tests replace it to run New without an API server.
var sharedStore = heartbeat.Shared

// newPlugin builds the plugin without a framework handle, for New and for tests.
func newPlugin(args Args, reports nodelookup.Nodes, now func() time.Time) *BandwidthAware {
	ledger := NewLedger(reports)
	ledger.minWindow = args.MinWindow.Duration
	ledger.SetDeadlines(args.Deadlines())
	pl := &BandwidthAware{args: args, reports: reports, ledger: ledger, now: now,
		msgStale: staleMessage(args.StaleAfter.Duration), msgPartial: partialMessage(args.MinWindow.Duration)}
	// The plugin's clock, which tests set after building it.
	ledger.now = func() time.Time { return pl.now() }
	ledger.changed = pl.nodeChanged
	// A floor needs to hear of every report: records that cannot tell have none.
	if s, ok := reports.(interface{ AddListener(heartbeat.Listener) }); ok {
		s.AddListener(heartbeat.Listener{Bandwidth: func(node string, _ *heartbeat.Bandwidth) { pl.nodeChanged(node) }})
		pl.floorOn = true
	}
	return pl
}

// NewWith builds the plugin from its parts, without a framework Handle (benchmarks,
// embedding): args (validated here), the heartbeat records, and the clock. Its ledger
// is not fed from the cluster's pods: only Reserve and Unreserve change it.
func NewWith(args Args, nodes nodelookup.Nodes, now func() time.Time) (*BandwidthAware, error) {
	if err := args.Validate(); err != nil {
		return nil, err
	}
	return newPlugin(args, nodes, now), nil
}

// Name implements fwk.Plugin.
func (pl *BandwidthAware) Name() string { return Name }

// Ledger exposes the reservation ledger (for the webhook's and tests' inspection).
func (pl *BandwidthAware) Ledger() *Ledger { return pl.ledger }
