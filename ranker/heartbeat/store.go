// Package heartbeat gives the ranker's plugins an in-memory, watch-fed view of the
// agents' heartbeat objects (NodeBandwidth, NodeTopology), decoded once into their Go
// types so that Filter and Score never decode or call the API server.
package heartbeat

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"sextant.io/sextant/api/v1alpha1"
)

// Store holds the latest NodeBandwidth and NodeTopology of every node.
type Store struct {
	factory   dynamicinformer.DynamicSharedInformerFactory
	bandwidth cache.SharedIndexInformer
	topology  cache.SharedIndexInformer
}

// New returns a Store fed by watches through client. Call Start, then WaitForSync.
func New(client dynamic.Interface, resync time.Duration) *Store {
	f := dynamicinformer.NewDynamicSharedInformerFactory(client, resync)
	s := &Store{
		factory:   f,
		bandwidth: f.ForResource(v1alpha1.GroupVersion.WithResource("nodebandwidths")).Informer(),
		topology:  f.ForResource(v1alpha1.GroupVersion.WithResource("nodetopologies")).Informer(),
	}
	// Decode once, when the object arrives, not on every lookup.
	_ = s.bandwidth.SetTransform(decode(func() runtime.Object { return &v1alpha1.NodeBandwidth{} }))
	_ = s.topology.SetTransform(decode(func() runtime.Object { return &v1alpha1.NodeTopology{} }))
	return s
}

func decode(newObj func() runtime.Object) cache.TransformFunc {
	return func(in any) (any, error) {
		u, ok := in.(*unstructured.Unstructured)
		if !ok {
			return in, nil // tombstones and already-decoded objects pass through
		}
		out := newObj()
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
			return nil, fmt.Errorf("decode %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		return out, nil
	}
}

// Start starts the watches; they stop when ctx ends.
func (s *Store) Start(ctx context.Context) { s.factory.Start(ctx.Done()) }

// WaitForSync waits until both watches have listed what exists.
func (s *Store) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.bandwidth.HasSynced, s.topology.HasSynced) {
		return fmt.Errorf("heartbeat caches did not sync: %w", ctx.Err())
	}
	return nil
}

// Bandwidth returns the node's NodeBandwidth, or nil if it has none. The result is
// shared: do not modify it.
func (s *Store) Bandwidth(node string) *v1alpha1.NodeBandwidth {
	obj, ok, err := s.bandwidth.GetStore().GetByKey(node)
	if err != nil || !ok {
		return nil
	}
	nbw, _ := obj.(*v1alpha1.NodeBandwidth)
	return nbw
}

// Topology returns the node's NodeTopology, or nil if it has none. The result is
// shared: do not modify it.
func (s *Store) Topology(node string) *v1alpha1.NodeTopology {
	obj, ok, err := s.topology.GetStore().GetByKey(node)
	if err != nil || !ok {
		return nil
	}
	nt, _ := obj.(*v1alpha1.NodeTopology)
	return nt
}

// AddBandwidthHandler registers h for NodeBandwidth changes (e.g. to let the reservation
// ledger drop reservations a newer report covers).
func (s *Store) AddBandwidthHandler(h cache.ResourceEventHandler) error {
	_, err := s.bandwidth.AddEventHandler(h)
	return err
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*Store{}
)

// Shared returns the one Store of the process for the API server of cfg, starting and
// syncing it on first use, so that every plugin of every profile reads the same cache.
func Shared(ctx context.Context, cfg *rest.Config) (*Store, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s, ok := shared[cfg.Host]; ok {
		return s, nil
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("heartbeat client: %w", err)
	}
	s := New(client, 0)
	// The store lives as long as the process: plugin contexts end with their profile.
	s.Start(context.WithoutCancel(ctx))
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.WaitForSync(syncCtx); err != nil {
		return nil, err
	}
	shared[cfg.Host] = s
	return s, nil
}

// NewFromObjects returns a Store holding the given objects and nothing else, for tests
// of code that reads a Store.
func NewFromObjects(objs ...runtime.Object) *Store {
	s := &Store{
		bandwidth: cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1alpha1.NodeBandwidth{}, 0, cache.Indexers{}),
		topology:  cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1alpha1.NodeTopology{}, 0, cache.Indexers{}),
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *v1alpha1.NodeBandwidth:
			_ = s.bandwidth.GetStore().Add(o)
		case *v1alpha1.NodeTopology:
			_ = s.topology.GetStore().Add(o)
		}
	}
	return s
}
