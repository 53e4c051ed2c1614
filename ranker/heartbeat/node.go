package heartbeat

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// Node is one node's heartbeat, as the plugins read it in a scheduling cycle: the latest
// NodeBandwidth (parsed), the latest NodeTopology, and the values plugins derive from
// them, all reached with one lookup (by name, or by the Node object: Store.NodeOf) and
// read without locks.
//
// Why one record rather than a lookup per informer and per plugin cache (two informer
// stores, two plugin caches, the bandwidth ledger, each under a lock): Filter visits
// hundreds of nodes per pod, a different stretch of the cluster for each pod, so every
// map bucket, key and object it touches is a cache miss
// (docs/design/0006-one-heartbeat-record-per-node.md).
type Node struct {
	topology  atomic.Pointer[v1alpha1.NodeTopology]
	bandwidth atomic.Pointer[Bandwidth]
	slots     [slotCount]atomic.Value
	name      string
}

func (n *Node) isEmpty() bool { return n.bandwidth.Load() == nil && n.topology.Load() == nil }

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

// Topology is the node's latest NodeTopology, nil if it has none, as the store holds it:
// the parts the plugins read (trimTopology). Shared: do not modify it. A new object
// replaces it on every update, so its identity tells versions apart.
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
//
// The fields Filter and Score read come first and the first networks are held inside
// the struct, so that a node's check touches few cache lines: Filter's cost per node is
// its cache misses (docs/design/0006-one-heartbeat-record-per-node.md).
type Bandwidth struct {
	// Received is when the report reached the ranker, on the ranker's clock (see the
	// package doc, "Arrival"); zero when it did not come through a Store. Staleness is
	// judged by it.
	Received time.Time
	// Window is status.window; zero when absent.
	Window time.Duration
	// Networks are the report's networks (status.networks) as Filter and Score read
	// them. A report without networks, from an agent older than them, has one: the pod
	// network, from status.total (Legacy).
	Networks []Network
	// SampleTime is status.sampleTime, on the agent's clock; zero when the report has
	// none. It orders one agent's reports and dates them against its node's pods.
	SampleTime time.Time
	// Legacy is true when Networks was made from status.total.
	Legacy bool
	// inline holds Networks when there are few.
	inline [2]Network
	Object *v1alpha1.NodeBandwidth
	// Arrived is when the event carrying this version first reached the ranker, on the
	// ranker's clock; zero when it did not come through a Store. Unlike Received it is
	// never back-dated to a status write, so it answers whether a report came in after
	// a given moment, where a late delivery's Received may fall before it. It sits here,
	// past the fields Filter reads, because only PostFilter asks.
	Arrived time.Time
	// written is the version's status write on the API server's clock (zero when
	// unknown): the next version's delivery delay is judged against Arrived minus it
	// (dateReport).
	written time.Time
}

// Network is one network of a report, parsed.
type Network struct {
	Name string
	// IngressRemaining and EgressRemaining are the network's <direction>.remaining in
	// bits/s, valid when the matching Known is true (the capacity is known).
	IngressRemaining, EgressRemaining int64
	IngressKnown, EgressKnown         bool
	// Guarantee is set where the node keeps the guarantees of the pods placed on the
	// network (its GuaranteesEnforced condition is True). Behind a pointer, so that the
	// parsed form of a network that does not enforce, which Filter reads for every node,
	// stays small.
	Guarantee *Guarantee
}

// Guarantee is what the required rates of a network's pods may add up to, per
// direction, in bits/s.
type Guarantee struct {
	Ingress, Egress int64
}

// Enforced reports whether the node keeps the network's guarantees.
func (n *Network) Enforced() bool { return n.Guarantee != nil }

// Network returns the report's network called name, nil when the node has none.
func (b *Bandwidth) Network(name string) *Network {
	for i := range b.Networks {
		if b.Networks[i].Name == name {
			return &b.Networks[i]
		}
	}
	return nil
}

// parseEnforcement reads a network's GuaranteesEnforced condition and guarantees.
func (n *Network) parseEnforcement(nw *v1alpha1.NetworkBandwidth) {
	if nw.Guarantees == nil || !meta.IsStatusConditionTrue(nw.Conditions, v1alpha1.ConditionGuaranteesEnforced) {
		return
	}
	in, inOK := quantity(nw.Guarantees.Ingress.Capacity)
	eg, egOK := quantity(nw.Guarantees.Egress.Capacity)
	if inOK && egOK {
		n.Guarantee = &Guarantee{Ingress: in, Egress: eg}
	}
}

func quantity(q *resource.Quantity) (int64, bool) {
	if q == nil {
		return 0, false
	}
	return BitsPerSecond(q)
}

func parseNetwork(name string, bw *v1alpha1.Bandwidth) Network {
	if name == annotations.PodNetwork {
		// The constant's own string: Filter compares it with the pod's network, most
		// often that same constant, by pointer, without reading the report's copy.
		name = annotations.PodNetwork
	}
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
		if len(st.Networks) <= len(b.inline) {
			b.Networks = b.inline[:len(st.Networks)]
		} else {
			b.Networks = make([]Network, len(st.Networks))
		}
		for i := range st.Networks {
			b.Networks[i] = parseNetwork(st.Networks[i].Name, &st.Networks[i].Bandwidth)
			b.Networks[i].parseEnforcement(&st.Networks[i])
		}
	default:
		// Without a total either, the report still has the pod network, its capacity
		// unknown.
		total := st.Total
		if total == nil {
			total = &v1alpha1.Bandwidth{}
		}
		b.inline[0] = parseNetwork(annotations.PodNetwork, total)
		b.Networks = b.inline[:1]
		b.Legacy = true
	}
	return b
}

// index maps node names to their records: a plain map that readers load from an
// atomic pointer and never lock, replaced by a copy when records are created or
// removed (copy on write). A record's contents change through its atomics without
// touching the map. Writers serialize on mu so that a record is created, changed and
// emptied in order.
//
// New records wait in pending until enough have gathered, or a reader misses the map
// while some wait, and are then published together: a copy per record would cost
// O(nodes²) to list every node's heartbeats at startup, the batches cost O(nodes) in all.
//
// Why not a sync.Map: its lookup (a hash trie, several dependent loads per name) costs
// more than a plain map's, and Filter makes one per node of every pod
// (docs/design/0006-one-heartbeat-record-per-node.md).
//
// A record whose node lost both heartbeat objects stays in the map, empty, for
// keepEmpty: if the objects come back meanwhile (an agent restarting) they go into the
// same record, so a reader still holding it, and what plugins published into its slots
// (the bandwidth ledger's entry), never goes stale. Only after that is it removed.
type index struct {
	records    atomic.Pointer[map[string]*Node]
	hasPending atomic.Bool
	mu         sync.Mutex
	pending    map[string]*Node
	live       int
	// empty holds when each empty record was emptied; swept is the last sweep.
	empty map[string]time.Time
	swept time.Time
	now   func() time.Time
}

// keepEmpty is how long an empty record stays findable: far longer than any scheduling
// cycle holds a record.
const keepEmpty = 10 * time.Minute

func newIndex() *index {
	x := &index{pending: map[string]*Node{}, empty: map[string]time.Time{}, now: time.Now}
	x.records.Store(&map[string]*Node{})
	return x
}

// get returns the node's record, nil if it has none.
func (x *index) get(name string) *Node {
	if n, ok := (*x.records.Load())[name]; ok {
		return n
	}
	if !x.hasPending.Load() {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.publishLocked()
	return (*x.records.Load())[name]
}

// getLocked is get for a holder of x.mu.
func (x *index) getLocked(name string) *Node {
	if n, ok := (*x.records.Load())[name]; ok {
		return n
	}
	return x.pending[name]
}

// each calls f with every record, in no order.
func (x *index) each(f func(*Node)) {
	x.mu.Lock()
	x.publishLocked()
	x.mu.Unlock()
	for _, n := range *x.records.Load() {
		f(n)
	}
}

// publishLocked publishes the pending records with the others; x.mu must be held.
func (x *index) publishLocked() {
	if len(x.pending) == 0 {
		return
	}
	cur := *x.records.Load()
	next := make(map[string]*Node, len(cur)+len(x.pending))
	maps.Copy(next, cur)
	maps.Copy(next, x.pending)
	x.records.Store(&next)
	clear(x.pending)
	x.hasPending.Store(false)
}

// update applies change to the node's record, creating it if needed.
func (x *index) update(name string, change func(*Node)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.getLocked(name)
	wasLive := n != nil && !n.isEmpty()
	if n == nil {
		n = &Node{name: name}
		x.pending[name] = n
		x.hasPending.Store(true)
		if len(x.pending) >= len(*x.records.Load())/4+64 {
			x.publishLocked()
		}
	}
	change(n)
	now := x.now()
	switch isLive := !n.isEmpty(); {
	case isLive && !wasLive:
		x.live++
		delete(x.empty, name)
	case !isLive && wasLive:
		x.live--
		x.empty[name] = now
	case !isLive:
		x.empty[name] = now
	}
	if len(x.empty) > 0 && now.Sub(x.swept) > time.Minute {
		x.swept = now
		var expired []string
		for name, at := range x.empty {
			if now.Sub(at) > keepEmpty {
				expired = append(expired, name)
				delete(x.empty, name)
			}
		}
		if len(expired) > 0 {
			x.publishLocked()
			next := maps.Clone(*x.records.Load())
			for _, name := range expired {
				delete(next, name)
			}
			x.records.Store(&next)
		}
	}
}

func (x *index) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.live
}
