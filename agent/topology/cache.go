package topology

import (
	"sync"
	"time"
)

// Cache reads a tree at most once per maxAge and hands every reader the same snapshot,
// so the parts of the agent that need the topology (NodeTopology, NUMA pinning) read
// sysfs once between them.
type Cache struct {
	root   string
	maxAge time.Duration
	now    func() time.Time

	mu   sync.Mutex
	snap *Snapshot
	at   time.Time
}

// NewCache caches Read(root) for maxAge.
func NewCache(root string, maxAge time.Duration) *Cache {
	return &Cache{root: root, maxAge: maxAge, now: time.Now}
}

// Root is the tree the cache reads.
func (c *Cache) Root() string { return c.root }

// Get returns a snapshot at most maxAge old, reading the tree if the last one is older.
// A failed read is not cached: the next Get tries again. The snapshot is shared: do not
// modify it.
func (c *Cache) Get() (*Snapshot, error) {
	return c.get(false)
}

// Fresh reads the tree now, whatever the age of the last snapshot.
func (c *Cache) Fresh() (*Snapshot, error) {
	return c.get(true)
}

func (c *Cache) get(fresh bool) (*Snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !fresh && c.snap != nil && now.Sub(c.at) < c.maxAge {
		return c.snap, nil
	}
	snap, err := Read(c.root)
	if err != nil {
		return nil, err
	}
	c.snap, c.at = snap, now
	return snap, nil
}
