package heartbeat

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"sextant.io/sextant/api/v1alpha1"
)

// New returns a Store fed by watches through client, listing through list. Call Start,
// then WaitForSync.
func New(client dynamic.Interface, list RawLister, resync time.Duration) *Store {
	registerMetrics()
	// Decode once, when the object arrives, not on every lookup: the transforms run on
	// each watched object, and listWatch runs them on each listed one as it decodes it.
	informer := func(resource, kind string, transform cache.TransformFunc) cache.SharedIndexInformer {
		gvr := v1alpha1.GroupVersion.WithResource(resource)
		// As the dynamic informers do: a client that cannot stream a list (the fake
		// ones of unit tests) is listed page by page.
		lw := cache.ToListWatcherWithWatchListSemantics(listWatch(client, list, gvr, kind, transform), client)
		inf := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, resync, cache.Indexers{})
		_ = inf.SetTransform(transform)
		return inf
	}
	s := &Store{
		bandwidth: informer("nodebandwidths", kindBandwidth, storeBandwidth),
		topology:  informer("nodetopologies", kindTopology, storeTopology),
		nodes:     newIndex(),
		now:       time.Now,
		rejected:  map[rejectKey]string{},
	}
	s.synced = map[string]cache.InformerSynced{}
	for kind, inf := range map[string]cache.SharedIndexInformer{kindBandwidth: s.bandwidth, kindTopology: s.topology} {
		// The handlers are registered before the informers start, which cannot fail.
		reg, _ := inf.AddEventHandler(s.recordHandler())
		s.synced[kind] = func() bool { return inf.HasSynced() && reg != nil && reg.HasSynced() }
		_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			s.watchErrors.Store(kind, err.Error())
			cache.DefaultWatchErrorHandler(ctx, r, err)
		})
	}
	return s
}

// recordHandler keeps the Node records in step with both informers.
func (s *Store) recordHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { s.put(obj, s.now(), initial) },
		UpdateFunc: func(_, obj any) { s.put(obj, s.now(), false) },
		DeleteFunc: s.remove,
	}
}

// Start starts the watches; they stop when ctx ends.
func (s *Store) Start(ctx context.Context) {
	go s.bandwidth.RunWithContext(ctx)
	go s.topology.RunWithContext(ctx)
}

// syncReportEvery is how often WaitForSync says what it still waits for: a ranker that
// cannot reach the API server, or finds no CRDs there, must not wait in silence.
const syncReportEvery = 15 * time.Second

// WaitForSync waits until both watches have listed what exists and the records hold
// it. While it waits it logs, every syncReportEvery, the kinds not listed yet and their
// last error; its own error names them too.
func (s *Store) WaitForSync(ctx context.Context) error {
	report := time.NewTicker(syncReportEvery)
	defer report.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		pending := s.pendingKinds()
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("heartbeat lists did not arrive (%s; are the sextant CRDs installed? kubectl get crd nodebandwidths.sextant.io nodetopologies.sextant.io): %w",
				strings.Join(pending, "; "), ctx.Err())
		case <-report.C:
			klog.InfoS("Waiting for the heartbeat lists from the API server", "pending", pending)
		case <-poll.C:
		}
	}
}

// pendingKinds names each kind whose list the records do not hold yet, with its last
// list or watch error.
func (s *Store) pendingKinds() []string {
	var pending []string
	for _, kind := range []string{kindBandwidth, kindTopology} {
		if synced := s.synced[kind]; synced != nil && synced() {
			continue
		}
		msg := kind + " not listed yet"
		if err, ok := s.watchErrors.Load(kind); ok {
			msg += ": " + err.(string)
		}
		pending = append(pending, msg)
	}
	return pending
}
