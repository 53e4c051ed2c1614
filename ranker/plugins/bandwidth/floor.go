package bandwidth

import (
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/heartbeat"
)

// floor is what the nodes of the scheduler's snapshot have available on the pod
// network, per direction, after the ledger's reservations and within the guarantees
// they keep: at each level, every node not marked has at least the level's rates. A pod
// that requires no more than a level on the pod network passes Filter on every such node
// (nothing else in check depends on the node), so Filter passes those nodes without
// finding their records. At the lowest level the fullest eighth of the nodes in either
// direction is marked, at the next the fullest quarter: a floor over every node would
// sit at the fullest one's rates, near zero in a cluster that places by bandwidth.
//
// Why: finding each node's record is most of BandwidthAware's Filter, which was the
// largest per-node check without a floor
// (docs/design/0086-bandwidth-filter-share-of-the-cycle.md).
//
// The floor holds while nothing lowers a node below it, and nodes are marked as they
// change instead of the floor being voided: a node's new report or removed one
// (a store listener), any change to its reservations or admitted guarantees (the
// ledger, under its lock, as it replaces the node's totals), or a node the snapshot
// did not have when the floor was computed, whose NodeInfo generation is above the
// floor's. A node is marked just after its record or totals change, so a Filter in
// between reads it as it was a moment before, as a Filter that read the record just
// before the change would. The floor lasts until the oldest report it read goes stale.
// A change a computation does not read is marked in the floor it publishes.
type floor struct {
	levels [len(floorFractions)]floorLevel
	// objects are the addresses of the snapshot's Node objects by name, which the
	// marks are kept by (see nodeMarks).
	objects map[string]uintptr
	// freshUntil is when the first report the floor read turns stale.
	freshUntil time.Time
	// at is when it was computed, over nodes nodes; marked is how many bits the
	// lowest level had set then.
	at     time.Time
	nodes  int
	marked int64
}

// floorLevel is one level of a floor: every node of the snapshot whose NodeInfo
// generation is at most gen and that marks does not hold has at least ingress and
// egress available.
type floorLevel struct {
	ingress, egress int64
	gen             int64
	marks           *nodeMarks
}

// floorFractions are the levels' shares of the nodes set aside, as divisors: the
// fullest eighth, then the fullest quarter.
var floorFractions = [...]int{8, 4}

const (
	// floorRefresh is how old a floor may get before it is recomputed, so that it
	// rises again as reservations are released and takes in nodes given pods since.
	floorRefresh = 5 * time.Second
	// floorRetry is the least time between two computations: each reads every node.
	floorRetry = time.Second
	// floorMarkedShare: once one in this many of the nodes the floor spoke for has
	// been marked, it is recomputed (after floorRetry).
	floorMarkedShare = 16
)

// passes reports whether the level lets Filter pass the node of nodeInfo without its
// record.
func (l *floorLevel) passes(nodeInfo fwk.NodeInfo, node *v1.Node) bool {
	return nodeInfo.GetGeneration() <= l.gen && !l.marks.has(objectOf(node))
}

// objectOf is the address of a Node object.
func objectOf(node *v1.Node) uintptr { return uintptr(unsafe.Pointer(node)) }

// mark marks node (by name) in every level.
func (f *floor) mark(node string) {
	if p, ok := f.objects[node]; ok {
		for i := range f.levels {
			f.levels[i].marks.mark(p)
		}
	}
}

// holds reports whether every direction req requires is within the level.
func (l *floorLevel) holds(req annotations.BandwidthRequest) bool {
	return (!req.Ingress.HasRequired || req.Ingress.Required <= l.ingress) &&
		(!req.Egress.HasRequired || req.Egress.Required <= l.egress)
}

// nodeMarks is a set of the snapshot's Node objects, kept as bits of a hash of their
// addresses: a node the floor speaks for has the NodeInfo generation it had when the
// floor was computed, so the same Node object, and its address is in the NodeInfo
// Filter is handed. A name would have to be read from the object's own memory, a cache
// miss per node, to be hashed. An object that shares
// another's bit is taken as marked too: it only costs that node a lookup.
type nodeMarks struct {
	shift uint
	words []atomic.Uint64
	// set counts the bits set.
	set atomic.Int64
}

func newNodeMarks(nodes int) *nodeMarks {
	// Eight bits per node keeps objects sharing a bit rare.
	n := bits.Len(uint(max(8*nodes, 64) - 1))
	return &nodeMarks{shift: uint(64 - n), words: make([]atomic.Uint64, 1<<(n-6))}
}

func (m *nodeMarks) bit(object uintptr) (*atomic.Uint64, uint64) {
	// Fibonacci hashing: objects are aligned and close together, and the top bits of
	// the product depend on all of the address's.
	h := (uint64(object) * 0x9e3779b97f4a7c15) >> m.shift
	return &m.words[h>>6], 1 << (h & 63)
}

func (m *nodeMarks) mark(object uintptr) {
	w, b := m.bit(object)
	if w.Or(b)&b == 0 {
		m.set.Add(1)
	}
}

func (m *nodeMarks) has(object uintptr) bool {
	w, b := m.bit(object)
	return w.Load()&b != 0
}

// floorBuild is a floor being computed: the names of the nodes that changed meanwhile,
// marked in it before it is published.
type floorBuild struct {
	mu      sync.Mutex
	changed []string
	done    bool
}

// publish marks in f (nil: no floor) the nodes that changed during its computation and
// makes it the current floor; changes from then on are marked in it by nodeChanged.
func (b *floorBuild) publish(current *atomic.Pointer[floor], f *floor) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f != nil {
		for _, node := range b.changed {
			f.mark(node)
		}
		f.marked = f.levels[0].marks.set.Load()
	}
	current.Store(f)
	b.done = true
}

// nodeChanged marks node in the floor: it no longer speaks for that node. A change
// during a computation is kept for the computation to mark, or, once it has published
// its floor, marked there: a change either is read by the computation or marks what it
// publishes.
func (pl *BandwidthAware) nodeChanged(node string) {
	if b := pl.floorBuilding.Load(); b != nil {
		b.mu.Lock()
		if !b.done {
			b.changed = append(b.changed, node)
		}
		b.mu.Unlock()
	}
	if f := pl.floor.Load(); f != nil {
		f.mark(node)
	}
}

// floorFor returns the lowest level of a current floor that holds req, nil if none
// does or the pod is not one a floor can speak for: one on another network, or judged
// by the strict best-fit window, which is also an upper bound. nodes is the snapshot
// PreFilter was given.
func (pl *BandwidthAware) floorFor(req annotations.BandwidthRequest, now time.Time, nodes []fwk.NodeInfo) *floorLevel {
	if !pl.floorOn || !req.HasRequired() || networkOf(req) != annotations.PodNetwork ||
		(pl.args.BestFitWindow == WindowStrict && pl.strategy(req) == annotations.BestFit) {
		return nil
	}
	f := pl.currentFloor(now, nodes)
	if f == nil || now.After(f.freshUntil) {
		return nil
	}
	for i := range f.levels {
		if l := &f.levels[i]; l.holds(req) {
			return l
		}
	}
	return nil
}

// currentFloor returns the floor, computed again first when it is old, stale, marked
// on too many of its nodes or over another number of nodes, at most once per
// floorRetry. Only PreFilter calls it, one pod at a time.
func (pl *BandwidthAware) currentFloor(now time.Time, nodes []fwk.NodeInfo) *floor {
	f := pl.floor.Load()
	if f != nil && len(nodes) == f.nodes && now.Sub(f.at) < floorRefresh && !now.After(f.freshUntil) &&
		f.levels[0].marks.set.Load()-f.marked <= int64(f.nodes/floorMarkedShare) {
		return f
	}
	if now.Sub(pl.floorTried) < floorRetry && now.Sub(pl.floorTried) >= 0 {
		return f
	}
	pl.floorTried = now
	return pl.computeFloor(now, nodes)
}

// computeFloor computes a floor over nodes at now and publishes it.
func (pl *BandwidthAware) computeFloor(now time.Time, nodes []fwk.NodeInfo) *floor {
	b := &floorBuild{}
	pl.floorBuilding.Store(b)
	defer pl.floorBuilding.Store(nil)

	type room struct {
		object          uintptr
		ingress, egress int64
	}
	rooms := make([]room, 0, len(nodes))
	f := &floor{at: now, nodes: len(nodes), objects: make(map[string]uintptr, len(nodes))}
	for i := range f.levels {
		f.levels[i].marks = newNodeMarks(len(nodes))
	}
	var gen int64
	for _, ni := range nodes {
		gen = max(gen, ni.GetGeneration())
		node := ni.Node()
		if node == nil {
			continue
		}
		p := objectOf(node)
		f.objects[node.Name] = p
		in, eg, until, ok := pl.floorRoom(pl.reports.NodeOf(node), now)
		if !ok {
			for i := range f.levels {
				f.levels[i].marks.mark(p)
			}
			continue
		}
		rooms = append(rooms, room{p, in, eg})
		if f.freshUntil.IsZero() || until.Before(f.freshUntil) {
			f.freshUntil = until
		}
	}
	if len(rooms) == 0 {
		b.publish(&pl.floor, nil)
		return nil
	}
	ins, egs := make([]int64, len(rooms)), make([]int64, len(rooms))
	for i, r := range rooms {
		ins[i], egs[i] = r.ingress, r.egress
	}
	slices.Sort(ins)
	slices.Sort(egs)
	for i, share := range floorFractions {
		l := &f.levels[i]
		l.ingress, l.egress, l.gen = ins[len(ins)/share], egs[len(egs)/share], gen
		for _, r := range rooms {
			if r.ingress < l.ingress || r.egress < l.egress {
				l.marks.mark(r.object)
			}
		}
	}
	b.publish(&pl.floor, f)
	return f
}

// floorRoom returns what the node of record rec has available on the pod network per
// direction at now, as check would judge a pod there: remaining minus reservations,
// and within what its guarantees leave where the node keeps them; and when its report
// turns stale. ok is false when check would reject any pod that requires a rate there.
func (pl *BandwidthAware) floorRoom(rec *heartbeat.Node, now time.Time) (ingress, egress int64, until time.Time, ok bool) {
	report, res := pl.ledger.reportAndReserved(rec, annotations.PodNetwork)
	nw := pl.usableNetwork(report, annotations.PodNetwork, now)
	if nw == nil || !nw.IngressKnown || !nw.EgressKnown {
		return 0, 0, time.Time{}, false
	}
	ingress, egress = nw.IngressRemaining-res.ingress, nw.EgressRemaining-res.egress
	if nw.Enforced() {
		ingress = min(ingress, nw.Guarantee.Ingress-res.guaranteedIn)
		egress = min(egress, nw.Guarantee.Egress-res.guaranteedEg)
	}
	return ingress, egress, report.Received.Add(pl.args.StaleAfter.Duration), true
}
