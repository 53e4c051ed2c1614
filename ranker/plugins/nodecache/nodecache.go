// Package nodecache keeps, per node, a value the plugins derive from the scheduler's
// NodeInfo of that node and the node's heartbeat object, from one scheduling cycle to
// the next.
//
// NUMAAware and DeviceAware need each node's free NUMA capacity and free devices in
// every cycle: the heartbeat's capacity minus what the node's pods take. Computing that
// for every node of every cycle was about 13% of sextant-ranker's CPU at 5000 nodes in
// a profile of make bench-ranker (see README, Measured). Between cycles a node's value only changes when its pods change,
// which the scheduler marks by a new NodeInfo generation (assigning, binding, deleting
// a pod; also every transient clone preemption and nominated pods make), or when its
// heartbeat object is replaced (the informer swaps in a new object on every update).
// Those two are the key; a hit returns the value computed for them.
package nodecache

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Cache maps a node name to the value computed for one (NodeInfo generation, heartbeat
// object) pair of that node. S is the heartbeat's pointer type, compared by identity.
// Values are shared between goroutines: callers must not modify them.
type Cache[S comparable, V any] struct {
	mu sync.RWMutex
	m  map[string]entry[S, V]
}

type entry[S comparable, V any] struct {
	generation int64
	source     S
	value      V
}

// New returns an empty cache.
func New[S comparable, V any]() *Cache[S, V] {
	return &Cache[S, V]{m: map[string]entry[S, V]{}}
}

// Get returns the value for node at generation and source, computing and keeping it
// when the cache holds none for exactly that pair.
func (c *Cache[S, V]) Get(node string, generation int64, source S, compute func() V) V {
	c.mu.RLock()
	e, ok := c.m[node]
	c.mu.RUnlock()
	if ok && e.generation == generation && e.source == source {
		return e.value
	}
	v := compute()
	c.mu.Lock()
	// Filter runs over nodes in parallel and may also see transient NodeInfo clones:
	// the last writer wins, and a stale entry costs one recomputation, never a wrong
	// answer, since a hit needs the exact pair.
	c.m[node] = entry[S, V]{generation: generation, source: source, value: v}
	c.mu.Unlock()
	return v
}

// Forget drops the node's entry (the Node was deleted).
func (c *Cache[S, V]) Forget(node string) {
	c.mu.Lock()
	delete(c.m, node)
	c.mu.Unlock()
}

// Len is the number of nodes held.
func (c *Cache[S, V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// ForgetDeletedNodes drops a node's entry when the informer sees the Node deleted, so
// the cache does not keep nodes a cluster has shed.
func (c *Cache[S, V]) ForgetDeletedNodes(nodes cache.SharedIndexInformer) error {
	_, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if node, ok := obj.(*v1.Node); ok {
				c.Forget(node.Name)
			}
		},
	})
	return err
}
