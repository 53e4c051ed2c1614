package heartbeat

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// Node is one node's heartbeat, as the plugins read it in a scheduling cycle: the latest
// NodeBandwidth (parsed), the latest NodeTopology, and the values plugins derive from
// them, all reached with one lookup (by name, or by the Node object: Store.NodeOf) and
// read without locks.
//
// Why one record rather than a lookup per informer and per plugin cache: Filter visits
// hundreds of nodes per pod, a different stretch of the cluster for each pod, so every
// map bucket, key and object it touches is a cache miss. At 5000 nodes the five lookups
// per node this replaced (two informer stores, two plugin caches, the bandwidth ledger),
// each under a lock, were about a tenth of the ranker's CPU in a profile (see
// docs/design/0006-one-heartbeat-record-per-node.md).
//
// The fields Filter reads for every node come first and fill one 64-byte cache line; the
// padding makes a record 128 bytes, an allocation size class whose objects start on a
// cache line, so that line is never split (TestNodeLayout).
type Node struct {
	// seen is the Node object this record was last found for by name; dropped is set
	// while the record is out of the index. Together they let NodeOf answer from its
	// pointer-keyed cache without reading the name (see byObject).
	seen      atomic.Pointer[v1.Node]
	dropped   atomic.Bool
	topology  atomic.Pointer[v1alpha1.NodeTopology]
	bandwidth atomic.Pointer[Bandwidth]
	slots     [slotCount]atomic.Value
	name      string
	_         [32]byte
}

// Name is the node's name.
func (n *Node) Name() string { return n.name }

// Bandwidth is the node's latest NodeBandwidth, nil if it has none. Shared: do not
// modify it.
func (n *Node) Bandwidth() *Bandwidth {
	if n == nil {
		return nil
	}
	return n.bandwidth.Load()
}

// Topology is the node's latest NodeTopology, nil if it has none. Shared: do not modify
// it. A new object replaces it on every update, so its identity tells versions apart.
func (n *Node) Topology() *v1alpha1.NodeTopology {
	if n == nil {
		return nil
	}
	return n.topology.Load()
}

// Slot names a place in every Node where one plugin keeps a value it derives from that
// node (package nodecache, the bandwidth ledger). Each slot holds values of one type.
type Slot int

const (
	// SlotNUMAFree holds NUMAAware's free capacity per NUMA node.
	SlotNUMAFree Slot = iota
	// SlotBandwidthReserved holds the bandwidth ledger's reserved totals.
	SlotBandwidthReserved
	// SlotDeviceFree holds DeviceAware's free devices. It is last, outside the first
	// cache line of a record: only pods asking for devices read it.
	SlotDeviceFree
	slotCount
)

// Slot returns the node's place for s. The value is the caller's to define; whoever
// stores must check on load that the value is its own (several plugin instances may
// share a Store).
func (n *Node) Slot(s Slot) *atomic.Value { return &n.slots[s] }

// Bandwidth is a NodeBandwidth with what Filter and Score read from it parsed once, when
// the object arrives, rather than chased through its pointers and Quantities per node
// and per pod.
type Bandwidth struct {
	Object *v1alpha1.NodeBandwidth
	// Received is when the report reached the ranker, on the ranker's clock (see the
	// package doc, "Arrival"); zero when it did not come through a Store. Staleness is
	// judged by it.
	Received time.Time
	// SampleTime is status.sampleTime, on the agent's clock; zero when the report has
	// none. It orders one agent's reports and dates them against its node's pods.
	SampleTime time.Time
	// Window is status.window; zero when absent.
	Window time.Duration
	// Networks are the report's networks (status.networks) as Filter and Score read
	// them. A report without networks, from an agent older than them, has one: the pod
	// network, from status.total (Legacy).
	Networks []Network
	// Legacy is true when Networks was made from status.total.
	Legacy bool
}

// Network is one network of a report, parsed.
type Network struct {
	Name string
	// IngressRemaining and EgressRemaining are the network's <direction>.remaining in
	// bits/s, valid when the matching Known is true (the capacity is known).
	IngressRemaining, EgressRemaining int64
	IngressKnown, EgressKnown         bool
}

// Network returns the report's network called name, nil when the node has none.
func (b *Bandwidth) Network(name string) *Network {
	for i := range b.Networks {
		if b.Networks[i].Name == name {
			return &b.Networks[i]
		}
	}
	return nil
}

func parseNetwork(name string, bw *v1alpha1.Bandwidth) Network {
	n := Network{Name: name}
	if r := bw.Ingress.Remaining; r != nil {
		n.IngressRemaining, n.IngressKnown = BitsPerSecond(r)
	}
	if r := bw.Egress.Remaining; r != nil {
		n.EgressRemaining, n.EgressKnown = BitsPerSecond(r)
	}
	return n
}

// ParseBandwidth returns nbw's parsed form, without Received; nil for nil. A remaining
// that is not a rate of 0 to int64 bits/s counts as unknown (DecodeBandwidth rejects
// such a report before it reaches a Store).
func ParseBandwidth(nbw *v1alpha1.NodeBandwidth) *Bandwidth {
	if nbw == nil {
		return nil
	}
	b := &Bandwidth{Object: nbw}
	st := nbw.Status
	if st.SampleTime != nil {
		b.SampleTime = st.SampleTime.Time
	}
	if st.Window != nil {
		b.Window = st.Window.Duration
	}
	switch {
	case len(st.Networks) > 0:
		b.Networks = make([]Network, len(st.Networks))
		for i := range st.Networks {
			b.Networks[i] = parseNetwork(st.Networks[i].Name, &st.Networks[i].Bandwidth)
		}
	default:
		// Without a total either, the pod network's capacity is unknown, as it was
		// before networks.
		total := st.Total
		if total == nil {
			total = &v1alpha1.Bandwidth{}
		}
		b.Networks = []Network{parseNetwork(annotations.PodNetwork, total)}
		b.Legacy = true
	}
	return b
}

// index maps node names to their records. Readers look in an immutable table without
// locking; writers change the authoritative map under a mutex and the readers' table is
// replaced by a new one once enough lookups have missed it (as sync.Map once did).
// Names are added and removed only when heartbeat objects appear and go, so after
// startup nearly every lookup is lock-free; a record's contents change through its
// atomics without touching the maps.
type index struct {
	read atomic.Pointer[table]
	// byObject is a direct-mapped cache from the Node objects of kube-scheduler's
	// snapshot to their records. Filter and Score are handed those objects; between
	// informer updates each stays the same, so hashing its address replaces hashing and
	// comparing the name, two cache misses per node and plugin at 5000 nodes (the name's
	// bytes and the record's). A slot is trusted only when its record's seen is the
	// very object asked for: the record holds that object, so its address cannot be
	// reused for another while the answer stands.
	byObject atomic.Pointer[objectCache]
	// dirty is set while all has names read lacks or read has names all dropped.
	dirty atomic.Bool

	mu     sync.Mutex
	all    map[string]*Node
	misses int
}

// table is an open-addressing hash table of records, built once and then only read.
// Why not a Go map: Filter looks up a different stretch of the cluster for each pod, so
// every lookup misses the CPU's caches, and a map touches a control word, a slot group
// and the key's bytes before it reaches the record. Here the slots (hash, record) sit
// in one flat array a few hundred KiB long, which stays cached between pods, and only
// the record and its name are read beyond it.
type table struct {
	mask  uint64
	slots []tableSlot
}

type tableSlot struct {
	hash uint64
	node *Node
}

var hashSeed = maphash.MakeSeed()

func newTable(nodes map[string]*Node) *table {
	size := uint64(16)
	for size < uint64(len(nodes))*4/3+1 {
		size *= 2
	}
	t := &table{mask: size - 1, slots: make([]tableSlot, size)}
	for name, n := range nodes {
		h := maphash.String(hashSeed, name)
		i := h & t.mask
		for t.slots[i].node != nil {
			i = (i + 1) & t.mask
		}
		t.slots[i] = tableSlot{hash: h, node: n}
	}
	return t
}

func (t *table) get(name string) (*Node, bool) {
	h := maphash.String(hashSeed, name)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.node == nil {
			return nil, false
		}
		if s.hash == h && s.node.name == name {
			return s.node, true
		}
	}
}

func newIndex() *index {
	x := &index{all: map[string]*Node{}}
	x.read.Store(newTable(nil))
	x.byObject.Store(newObjectCache(0))
	return x
}

// objectCache maps Node objects' addresses to records: a bucket of four slots, one
// cache line, per address hash, each slot holding the hash it was stored for next to the
// record, so a lookup reads only the record whose slot matches. Why buckets: a
// direct-mapped cache of four slots per record still sent about one lookup in seven at
// 5000 nodes to the lookup by name, wherever two nodes' objects shared a slot and took
// it from each other (docs/design/0006-one-heartbeat-record-per-node.md); here five
// must share a bucket for that.
type objectCache struct {
	shift   uint
	buckets []objectBucket
}

type objectBucket [4]objectSlot

type objectSlot struct {
	hash atomic.Uint64
	rec  atomic.Pointer[Node]
}

// newObjectCache returns a cache of at most one record per bucket on average; it is
// replaced once there are two (fits).
func newObjectCache(records int) *objectCache {
	bits := uint(3)
	for 1<<bits < records {
		bits++
	}
	return &objectCache{shift: 64 - bits, buckets: make([]objectBucket, 1<<bits)}
}

// fits reports whether the cache holds no more than two records per bucket.
func (c *objectCache) fits(records int) bool { return 2*len(c.buckets) >= records }

// hashObject is Fibonacci hashing of the object's address (whose low bits are an
// allocation's alignment). The multiplication is a bijection, so the hash names the
// address, and it is 0 only for nil, which marks an empty slot.
func hashObject(node *v1.Node) uint64 {
	return uint64(uintptr(unsafe.Pointer(node))) * 0x9e3779b97f4a7c15
}

// getObject returns the record of node (by its name), nil if it has none.
func (x *index) getObject(node *v1.Node) *Node {
	c := x.byObject.Load()
	h := hashObject(node)
	b := &c.buckets[h>>c.shift]
	for i := range b {
		if b[i].hash.Load() == h {
			if n := b[i].rec.Load(); n != nil && n.seen.Load() == node && !n.dropped.Load() {
				return n
			}
		}
	}
	n := x.get(node.Name)
	if n == nil {
		return nil
	}
	n.seen.Store(node)
	// A record dropped meanwhile must not be cached as node's: either this sees the
	// flag, or drop's clearing of seen comes after the store above.
	if n.dropped.Load() {
		n.seen.CompareAndSwap(node, nil)
		return n
	}
	// The slot holding this hash already, else an empty one, else any, by two bits of
	// the hash below the bucket's. Writers racing on a slot may leave one's hash with
	// the other's record; seen rejects that, and the next lookup stores it again.
	s := &b[h>>(c.shift-2)&3]
	for i := range b {
		if v := b[i].hash.Load(); v == h || v == 0 {
			s = &b[i]
			break
		}
	}
	s.rec.Store(n)
	s.hash.Store(h)
	return n
}

// get returns the node's record, nil if it has none.
func (x *index) get(name string) *Node {
	if n, ok := x.read.Load().get(name); ok || !x.dirty.Load() {
		return n
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.all[name]
	x.misses++
	if x.misses > len(x.all)/8 {
		x.publishLocked()
	}
	return n
}

func (x *index) publishLocked() {
	x.read.Store(newTable(x.all))
	if !x.byObject.Load().fits(len(x.all)) {
		x.byObject.Store(newObjectCache(len(x.all)))
	}
	x.dirty.Store(false)
	x.misses = 0
}

// update applies change to the node's record, creating it if needed, and drops the
// record when change leaves it without heartbeat objects.
func (x *index) update(name string, change func(*Node)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.all[name]
	if n == nil {
		// A record dropped but still in the readers' map is revived, not replaced:
		// readers must never hold a record that no longer gets updates.
		if n, _ = x.read.Load().get(name); n == nil {
			n = &Node{name: name}
		}
		n.dropped.Store(false)
		x.all[name] = n
		x.dirty.Store(true)
	}
	change(n)
	if n.bandwidth.Load() == nil && n.topology.Load() == nil {
		delete(x.all, name)
		x.dirty.Store(true)
		n.dropped.Store(true)
		n.seen.Store(nil)
	}
}

func (x *index) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.all)
}
