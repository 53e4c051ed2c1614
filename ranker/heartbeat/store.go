package heartbeat

import (
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"sextant.io/sextant/api/v1alpha1"
)

// Store holds the latest NodeBandwidth and NodeTopology of every node, as one Node
// record per node.
type Store struct {
	bandwidth cache.SharedIndexInformer
	topology  cache.SharedIndexInformer
	nodes     *index
	// synced reports, per kind, whether the records hold what its informer listed at
	// start.
	synced map[string]cache.InformerSynced
	// topologyVersion counts the NodeTopology objects added, replaced and removed.
	topologyVersion atomic.Uint64
	// now is the ranker's clock, which stamps a report's arrival.
	now func() time.Time

	// rejected holds, per kind and object name, the version last rejected, so each
	// rejected version is logged and counted once however often it is delivered.
	rejectedMu sync.Mutex
	rejected   map[rejectKey]string

	// listeners are told of each change once the record holds it (copy on write).
	listeners atomic.Pointer[[]Listener]

	// watchErrors is the last list or watch error per kind, for WaitForSync to name.
	watchErrors sync.Map
}

type rejectKey struct{ kind, name string }

// put makes obj its node's current object of its kind, arrived at received; initial
// says it comes from the list the informer started with.
func (s *Store) put(obj any, received time.Time, initial bool) {
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		s.forgetRejection(kindBandwidth, o.Name)
		b := ParseBandwidth(o)
		b.Arrived, b.written = received, statusWritten(o)
		s.nodes.update(o.Name, func(n *Node) {
			cur := n.bandwidth.Load()
			b.Received = dateReport(cur, b.written, received, initial)
			// A relist delivers versions the store holds again: they arrived before.
			if cur != nil && cur.Object != nil && o.ResourceVersion != "" && cur.Object.ResourceVersion == o.ResourceVersion {
				b.Received = minTime(b.Received, cur.Received)
				b.Arrived = minTime(b.Arrived, cur.Arrived)
			} else if b.Received.Before(received) && !initial {
				klog.V(2).InfoS("NodeBandwidth reached the ranker late (watch break); dating it by its status write",
					"node", o.Name, "resourceVersion", o.ResourceVersion, "written", b.written, "received", b.Received)
			}
			setBandwidth(n, b)
		})
		s.tellBandwidth(o.Name, b)
	case *v1alpha1.NodeTopology:
		s.forgetRejection(kindTopology, o.Name)
		changed := true
		s.nodes.update(o.Name, func(n *Node) {
			changed = !sameTopology(n.topology.Load(), o)
			n.topology.Store(o)
		})
		// Agents rewrite an unchanged NodeTopology every --topology-resync. Told of each,
		// NUMAAware would recompute its floor over every node on the scheduling path, and
		// NUMAAware and DeviceAware would send every pod waiting for a topology change
		// back to the queue, to fail again.
		if changed {
			s.topologyVersion.Add(1)
			s.tellTopology(o.Name)
		}
	case *Rejected:
		s.noteRejection(o)
		s.dropRecord(o.Kind, o.Name)
	}
}

// sameTopology reports whether next, replacing prev (nil: none), is the same object
// holding the same topology: as the store holds them (trimTopology), a rewrite by the
// agent that changed nothing the plugins read.
func sameTopology(prev, next *v1alpha1.NodeTopology) bool {
	return prev != nil && prev.UID == next.UID && equality.Semantic.DeepEqual(prev.Status, next.Status)
}

// dropRecord makes the node have no object of kind (deleted, or rejected).
func (s *Store) dropRecord(kind, node string) {
	switch kind {
	case kindBandwidth:
		s.nodes.update(node, func(n *Node) { setBandwidth(n, nil) })
		s.tellBandwidth(node, nil)
	case kindTopology:
		s.nodes.update(node, func(n *Node) { n.topology.Store(nil) })
		s.topologyVersion.Add(1)
		s.tellTopology(node)
	}
}

func (s *Store) remove(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		s.dropRecord(kindBandwidth, o.Name)
	case *v1alpha1.NodeTopology:
		s.dropRecord(kindTopology, o.Name)
	case *Rejected:
		s.forgetRejection(o.Kind, o.Name)
		s.dropRecord(o.Kind, o.Name)
	}
}

// noteRejection logs and counts a rejected object version the first time it is
// delivered: a relist delivers it again, and an agent that keeps writing bad reports
// is logged once per write, not once per event.
func (s *Store) noteRejection(r *Rejected) {
	key := rejectKey{r.Kind, r.Name}
	s.rejectedMu.Lock()
	seen, ok := s.rejected[key]
	s.rejected[key] = r.ResourceVersion
	s.rejectedMu.Unlock()
	if ok && seen == r.ResourceVersion {
		return
	}
	reason := r.Reason()
	rejectedTotal.WithLabelValues(r.Kind, reason).Inc()
	klog.ErrorS(r.Err, "Ignoring a heartbeat object the ranker cannot use; its node counts as having no report of this kind until a usable one arrives",
		"kind", r.Kind, "node", r.Name, "resourceVersion", r.ResourceVersion, "reason", reason)
}

func (s *Store) forgetRejection(kind, name string) {
	s.rejectedMu.Lock()
	defer s.rejectedMu.Unlock()
	if len(s.rejected) > 0 {
		delete(s.rejected, rejectKey{kind, name})
	}
}

// TopologyVersion changes whenever a node's NodeTopology is added, removed, or replaced
// by one that differs in what the store holds of it (sameTopology), after the node's
// record shows the change: a reader that sees the same version before and after reading
// records has read what every record's current topology holds.
func (s *Store) TopologyVersion() uint64 { return s.topologyVersion.Load() }

// Node returns the node's record, nil when it has neither heartbeat object. It takes no
// lock: Filter calls it for every node of every pod.
func (s *Store) Node(name string) *Node { return s.nodes.get(name) }

// NodeOf returns the record of node, nil when it has neither heartbeat object.
func (s *Store) NodeOf(node *v1.Node) *Node { return s.nodes.get(node.Name) }

// Bandwidth returns the node's NodeBandwidth, or nil if it has none. The result is
// shared: do not modify it.
func (s *Store) Bandwidth(node string) *v1alpha1.NodeBandwidth {
	if b := s.Node(node).Bandwidth(); b != nil {
		return b.Object
	}
	return nil
}

// Topology returns the node's NodeTopology as the store holds it (Node.Topology), or
// nil if it has none. The result is shared: do not modify it.
func (s *Store) Topology(node string) *v1alpha1.NodeTopology {
	return s.Node(node).Topology()
}

// Len is the number of nodes with a heartbeat object.
func (s *Store) Len() int { return s.nodes.len() }

// EachBandwidth calls f with every node's current NodeBandwidth, in no order.
func (s *Store) EachBandwidth(f func(node string, b *Bandwidth)) {
	s.nodes.each(func(n *Node) {
		if b := n.Bandwidth(); b != nil {
			f(n.name, b)
		}
	})
}

// setBandwidth makes b the node's report, keeping the count of nodes whose report is
// legacy (made from status.total by an agent older than networks) up to date.
func setBandwidth(n *Node, b *Bandwidth) {
	prev := n.bandwidth.Swap(b)
	was, is := prev != nil && prev.Legacy, b != nil && b.Legacy
	switch {
	case is && !was:
		legacyReports.Inc()
	case was && !is:
		legacyReports.Dec()
	}
}
