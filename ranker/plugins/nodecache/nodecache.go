// Package nodecache keeps, per node, a value the plugins derive from the scheduler's
// NodeInfo of that node and the node's heartbeat object, from one scheduling cycle to
// the next.
//
// NUMAAware and DeviceAware need each node's free NUMA capacity and free devices in
// every cycle: the heartbeat's capacity minus what the node's pods take, which is too
// costly to recompute for every node of every cycle
// (docs/design/0005-cache-free-capacity-per-node.md). Between cycles a node's value only changes when its pods change, which the scheduler
// marks by a new NodeInfo generation (assigning, binding, deleting a pod; also every
// transient clone preemption and nominated pods make), or when its heartbeat object is
// replaced (the informer swaps in a new object on every update). Those two are the key;
// a hit returns the value computed for them.
//
// The value lives in the node's heartbeat record (a heartbeat.Slot), not in a map of its
// own: Filter reaches the record anyway, and a map of its own would cost one more
// lookup per node and plugin (docs/design/0006-one-heartbeat-record-per-node.md). A node
// loses its value with its record, when its heartbeat objects go.
package nodecache

import (
	"sextant.io/sextant/ranker/heartbeat"
)

// Cache keeps one value per node, for one (NodeInfo generation, heartbeat object) pair
// of that node, in the node's record at one slot. S is the heartbeat's pointer type,
// compared by identity. Values are shared between goroutines: callers must not modify
// them.
type Cache[S comparable, V any] struct {
	slot heartbeat.Slot
}

type entry[S comparable, V any] struct {
	// owner tells apart caches of plugin instances that share a Store (one per
	// profile): each recomputes rather than read the other's value.
	owner      *Cache[S, V]
	generation int64
	source     S
	value      V
}

// New returns a cache that keeps its values at slot. Every cache of one slot must have
// the same S and V.
func New[S comparable, V any](slot heartbeat.Slot) *Cache[S, V] {
	return &Cache[S, V]{slot: slot}
}

// Get returns the value for the node at generation and source, computing and keeping it
// when the node holds none for exactly that pair. The value is kept inline with the key
// it was computed for, one pointer from the node's record, and Get returns a pointer to
// it there: a hit in Filter then costs no more memory reads than the key.
func (c *Cache[S, V]) Get(node *heartbeat.Node, generation int64, source S, compute func() V) *V {
	slot := node.Slot(c.slot)
	if e, ok := slot.Load().(*entry[S, V]); ok && e.owner == c && e.generation == generation && e.source == source {
		return &e.value
	}
	e := &entry[S, V]{owner: c, generation: generation, source: source, value: compute()}
	// Filter runs over nodes in parallel and may also see transient NodeInfo clones:
	// the last writer wins, and a stale entry costs one recomputation, never a wrong
	// answer, since a hit needs the exact pair.
	slot.Store(e)
	return &e.value
}
