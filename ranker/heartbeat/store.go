// Package heartbeat gives the ranker's plugins an in-memory, watch-fed view of the
// agents' heartbeat objects (NodeBandwidth, NodeTopology), decoded once into their Go
// types so that Filter and Score never decode or call the API server.
package heartbeat

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"sextant.io/sextant/api/v1alpha1"
)

// Store holds the latest NodeBandwidth and NodeTopology of every node, as one Node
// record per node.
type Store struct {
	factory   dynamicinformer.DynamicSharedInformerFactory
	bandwidth cache.SharedIndexInformer
	topology  cache.SharedIndexInformer
	nodes     *index
	// synced reports whether the records hold what the informers listed at start.
	synced []cache.InformerSynced
	// topologyVersion counts the NodeTopology objects added, replaced and removed.
	topologyVersion atomic.Uint64
}

// New returns a Store fed by watches through client. Call Start, then WaitForSync.
func New(client dynamic.Interface, resync time.Duration) *Store {
	f := dynamicinformer.NewDynamicSharedInformerFactory(client, resync)
	s := &Store{
		factory:   f,
		bandwidth: f.ForResource(v1alpha1.GroupVersion.WithResource("nodebandwidths")).Informer(),
		topology:  f.ForResource(v1alpha1.GroupVersion.WithResource("nodetopologies")).Informer(),
		nodes:     newIndex(),
	}
	// Decode once, when the object arrives, not on every lookup.
	_ = s.bandwidth.SetTransform(decodeBandwidth)
	_ = s.topology.SetTransform(decode(func() runtime.Object { return &v1alpha1.NodeTopology{} }))
	for _, inf := range []cache.SharedIndexInformer{s.bandwidth, s.topology} {
		// The handlers are registered before the informers start, which cannot fail.
		reg, _ := inf.AddEventHandler(s.recordHandler())
		if reg != nil {
			s.synced = append(s.synced, reg.HasSynced)
		}
	}
	return s
}

// recordHandler keeps the Node records in step with both informers.
func (s *Store) recordHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    s.put,
		UpdateFunc: func(_, obj any) { s.put(obj) },
		DeleteFunc: s.remove,
	}
}

func (s *Store) put(obj any) {
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		b := ParseBandwidth(o)
		s.nodes.update(o.Name, func(n *Node) { n.bandwidth.Store(b) })
	case *v1alpha1.NodeTopology:
		s.nodes.update(o.Name, func(n *Node) { n.topology.Store(o) })
		s.topologyVersion.Add(1)
	}
}

func (s *Store) remove(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		s.nodes.update(o.Name, func(n *Node) { n.bandwidth.Store(nil) })
	case *v1alpha1.NodeTopology:
		s.nodes.update(o.Name, func(n *Node) { n.topology.Store(nil) })
		s.topologyVersion.Add(1)
	}
}

// TopologyVersion changes whenever a node's NodeTopology is added, replaced or removed,
// after the node's record shows the change: a reader that sees the same version before
// and after reading records has read every record's current topology.
func (s *Store) TopologyVersion() uint64 { return s.topologyVersion.Load() }

// decode returns the transform that turns an informer's Unstructured into the typed
// object, without its managed fields: nothing in the ranker reads them, and at 5000
// nodes they were 13.5 MB of a 112 MB heap (README, "Measured").
func decode(newObj func() runtime.Object) cache.TransformFunc {
	return func(in any) (any, error) {
		u, ok := in.(*unstructured.Unstructured)
		if !ok {
			return in, nil // tombstones and already-decoded objects pass through
		}
		// The informer hands the transform its own copy, decoded from the watch.
		u.SetManagedFields(nil)
		out := newObj()
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
			return nil, fmt.Errorf("decode %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		return out, nil
	}
}

// decodeBandwidth is the transform of a NodeBandwidth informer.
var decodeBandwidth = decode(func() runtime.Object { return &v1alpha1.NodeBandwidth{} })

// Start starts the watches; they stop when ctx ends.
func (s *Store) Start(ctx context.Context) { s.factory.Start(ctx.Done()) }

// WaitForSync waits until both watches have listed what exists and the records hold
// it.
func (s *Store) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), append([]cache.InformerSynced{s.bandwidth.HasSynced, s.topology.HasSynced}, s.synced...)...) {
		return fmt.Errorf("heartbeat caches did not sync: %w", ctx.Err())
	}
	return nil
}

// Node returns the node's record, nil when it has neither heartbeat object. It takes no
// lock: Filter calls it for every node of every pod.
func (s *Store) Node(name string) *Node { return s.nodes.get(name) }

// NodeOf returns the record of node, nil when it has neither heartbeat object. For the
// Node objects of a scheduling snapshot, which Filter and Score are handed, it is
// cheaper than Node(node.Name): it seldom reads the name.
func (s *Store) NodeOf(node *v1.Node) *Node { return s.nodes.getObject(node) }

// Bandwidth returns the node's NodeBandwidth, or nil if it has none. The result is
// shared: do not modify it.
func (s *Store) Bandwidth(node string) *v1alpha1.NodeBandwidth {
	if b := s.Node(node).Bandwidth(); b != nil {
		return b.Object
	}
	return nil
}

// Topology returns the node's NodeTopology, or nil if it has none. The result is
// shared: do not modify it.
func (s *Store) Topology(node string) *v1alpha1.NodeTopology {
	return s.Node(node).Topology()
}

// Advance makes report (a parsed NodeBandwidth) its node's latest if the record holds
// none or one sampled earlier, and reports whether it did. It is for BandwidthAware's
// queueing hint, which runs on kube-scheduler's own informer of NodeBandwidth: that
// informer can deliver a report before the Store's does, and the pod the hint requeues
// for the report must be checked against it, or it fails again on the older report and
// waits for the next event. The Store's informer still delivers every version and
// replaces what Advance put; Advance never goes back to an earlier sample. (A report
// whose NodeBandwidth the Store saw deleted meanwhile comes back this way, and ages out
// after stale-after like any report.)
func (s *Store) Advance(report *Bandwidth) bool {
	if report == nil || report.Object == nil || report.SampleTime.IsZero() {
		return false
	}
	newer := func(n *Node) bool {
		cur := n.bandwidth.Load()
		return cur == nil || report.SampleTime.After(cur.SampleTime)
	}
	// The hint runs once per waiting pod for the same report: after the first, the
	// record is up to date, which needs no lock to see.
	if n := s.Node(report.Object.Name); n != nil && !newer(n) {
		return false
	}
	advanced := false
	s.nodes.update(report.Object.Name, func(n *Node) {
		if newer(n) {
			n.bandwidth.Store(report)
			advanced = true
		}
	})
	return advanced
}

// Len is the number of nodes with a heartbeat object.
func (s *Store) Len() int { return s.nodes.len() }

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
// of code that reads a Store. Put adds or replaces more.
func NewFromObjects(objs ...runtime.Object) *Store {
	s := &Store{
		bandwidth: cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1alpha1.NodeBandwidth{}, 0, cache.Indexers{}),
		topology:  cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1alpha1.NodeTopology{}, 0, cache.Indexers{}),
		nodes:     newIndex(),
	}
	for _, o := range objs {
		s.Put(o)
	}
	return s
}

// Put adds or replaces a heartbeat object of a Store made by NewFromObjects, as an
// informer update would.
func (s *Store) Put(obj runtime.Object) {
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		_ = s.bandwidth.GetStore().Update(o)
	case *v1alpha1.NodeTopology:
		_ = s.topology.GetStore().Update(o)
	}
	s.put(obj)
}

// Delete removes a heartbeat object from a Store made by NewFromObjects, as an informer
// delete would.
func (s *Store) Delete(obj runtime.Object) {
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		_ = s.bandwidth.GetStore().Delete(o)
	case *v1alpha1.NodeTopology:
		_ = s.topology.GetStore().Delete(o)
	}
	s.remove(obj)
}
