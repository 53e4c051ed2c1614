package numa

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
)

// floor is free capacity that one NUMA node of every node of the scheduler's snapshot
// has at least: for each node with NUMA nodes, some NUMA node has floor's CPU and memory
// free (as Filter computes free). A pod that asks for no more fits in one NUMA node
// everywhere, so Filter would pass every node: PreFilter skips Filter for it, and Score
// unless a node without NodeTopology (which scores lowest) is among the feasible ones.
// Under single-numa-node, Filter would reject nodes without NodeTopology: such a pod
// skips Filter only when there are none.
//
// Beside it, the floor keeps what all NUMA nodes of every such node have free together.
// Filter passes a pod without a policy on any node whose NUMA nodes together hold it, so
// such a pod within that floor skips Filter too; Score still runs for it unless it is
// within the one-NUMA-node floor, as some nodes may fit it in one NUMA node and others
// not. These are the pods larger than what the fullest node has left in a NUMA node
// (docs/design/0013-numa-together-floor.md).
//
// Why: most pods are small next to a NUMA node, and Filter otherwise reads each node's
// record and free capacity for them, two or three cache misses per node, to find what
// the floor says at once (docs/design/0012-numa-floor.md,
// docs/design/0013-numa-together-floor.md).
//
// The floor is computed over every node of the snapshot, then lowered by each
// reservation this plugin makes. Anything else that may take NUMA capacity voids it: a
// NodeTopology added, replaced or removed (Store.TopologyVersion), a node added or
// removed (the snapshot's node list changes), a pod asking for CPU or memory that shows
// up bound without this plugin's reservation (another profile's, another scheduler's,
// a DaemonSet's; annotated or not, since FreeCapacity counts both), a pod whose NUMA
// annotation changes, a Reserve that finds less free than the floor promised. It is
// also recomputed every floorRefresh, to rise again as pods leave and to follow a
// kubelet that reserves more. A pod bound in the moment between such an
// event and its informer notification can slip past the floor; Reserve recomputes the
// node's choice from the snapshot and turns the pod back then (Unschedulable, retried),
// so no NUMA node is overcommitted.
type floor struct {
	// one is the floor of a node's roomiest NUMA node; together, of all of a node's
	// NUMA nodes' free capacity summed.
	one, together Request
	// bare are the nodes of the snapshot without NUMA nodes (nodes without an agent,
	// virtual nodes): few, and the ones that make Score rank anything for such a pod.
	bare []fwk.NodeInfo
	// unpinned says some node with NUMA nodes does not pin pods, or its agent was
	// silent when the floor was computed: Filter drops it for a pod under
	// single-numa-node. A node that falls silent later, within floorRefresh, is caught
	// by Reserve, which voids the floor.
	unpinned bool
	// What the floor was computed for: the void count, the topology version, the
	// snapshot's node list, and when.
	voids    uint64
	topology uint64
	list     *fwk.NodeInfo
	nodes    int
	at       time.Time
}

const (
	// floorRefresh is how old a floor may get before it is recomputed.
	floorRefresh = 10 * time.Second
	// spareRefresh is how old the spare floor may get before it is recomputed: the
	// nodes given pods since fall out of its reach. A computation reads every node, so
	// it waits also until one in spareStale nodes may have been given pods.
	spareRefresh = 2 * time.Second
	spareStale   = 32
	// floorRetry is how long after a recomputation a void floor waits for the next:
	// pods bound by others can void it every cycle, and a computation reads every node.
	floorRetry = time.Second
)

// floorKeeper holds the plugin's floor. The scheduling goroutine computes and lowers
// it (PreFilter, Reserve); informer handlers void it.
type floorKeeper struct {
	cur   atomic.Pointer[floor]
	spare atomic.Pointer[spare]
	voids atomic.Uint64
	// changes counts what gave a node new pods: this plugin's reservations and voids.
	changes atomic.Uint64
	// tried is when the last computation ran.
	tried time.Time
}

// void makes the floor unusable until it is computed again.
func (k *floorKeeper) void() {
	k.voids.Add(1)
	k.changes.Add(1)
}

// fitsFloor reports whether req fits one NUMA node of every node with NUMA nodes of the
// snapshot whose node list is nodes, and whether it fits all NUMA nodes of every such
// node together, and returns the nodes without and whether some node does not pin. It
// computes the floor when there is none for this list, topology version and void
// count, or it is older than floorRefresh, but not more often than every floorRetry.
func (pl *NUMAAware) fitsFloor(req Request, nodes []fwk.NodeInfo) (one, together bool, bare []fwk.NodeInfo, unpinned bool) {
	if pl.nodes == nil || len(nodes) == 0 {
		return false, false, nil, false
	}
	now := pl.now()
	k := &pl.floor
	f := k.cur.Load()
	if f == nil || f.voids != k.voids.Load() || f.topology != pl.nodes.TopologyVersion() ||
		f.list != unsafe.SliceData(nodes) || f.nodes != len(nodes) || now.Sub(f.at) >= floorRefresh {
		if now.Sub(k.tried) < floorRetry {
			return false, false, nil, false
		}
		f = pl.recomputeFloor(nodes, now)
	}
	return req.within(f.one), req.within(f.together), f.bare, f.unpinned
}

// recomputeFloor computes the floor and the spare floor of nodes and keeps both.
func (pl *NUMAAware) recomputeFloor(nodes []fwk.NodeInfo, now time.Time) *floor {
	k := &pl.floor
	k.tried = now
	f, sp := pl.computeFloor(nodes, now)
	k.cur.Store(f)
	k.spare.Store(sp)
	return f
}

// computeFloor returns the floor and the spare floor of nodes. The void count, the
// topology version and the change count are read first: a change while the nodes are
// read voids the floor, and makes the spare floor older.
func (pl *NUMAAware) computeFloor(nodes []fwk.NodeInfo, now time.Time) (*floor, *spare) {
	f := &floor{
		one:      Request{MilliCPU: math.MaxInt64, Memory: math.MaxInt64},
		together: Request{MilliCPU: math.MaxInt64, Memory: math.MaxInt64},
		voids:    pl.floor.voids.Load(),
		topology: pl.nodes.TopologyVersion(),
		list:     unsafe.SliceData(nodes),
		nodes:    len(nodes),
		at:       now,
	}
	sp := &spare{topology: f.topology, changes: pl.floor.changes.Load(), at: now}
	room := make([]nodeRoom, 0, len(nodes))
	for _, ni := range nodes {
		gen := ni.GetGeneration()
		sp.gen = max(sp.gen, gen)
		node := ni.Node()
		if node == nil {
			continue
		}
		rec := pl.nodes.NodeOf(node)
		nf, topo, ok := pl.numaFreeOf(rec, ni)
		if !ok {
			f.bare = append(f.bare, ni)
			sp.lowOne = append(sp.lowOne, gen)
			sp.lowTogether = append(sp.lowTogether, gen)
			continue
		}
		r := nodeRoom{gen: gen, one: roomiest(nf.free(), nil, Request{}), together: total(nf.free())}
		f.one = lowest(f.one, r.one)
		f.together = lowest(f.together, r.together)
		if !pl.pins(rec, topo) {
			// Filter drops such a node for a pod under single-numa-node: it is never
			// passed on the spare floor's say-so.
			f.unpinned = true
			sp.lowOne = append(sp.lowOne, gen)
			r.unpinned = true
		}
		room = append(room, r)
	}
	sp.one, sp.lowOne = spareFloor(room, sp.lowOne, func(r *nodeRoom) (Request, bool) { return r.one, !r.unpinned })
	sp.together, sp.lowTogether = spareFloor(room, sp.lowTogether, func(r *nodeRoom) (Request, bool) { return r.together, true })
	return f, sp
}

// spare is the floor with the fullest nodes set aside, for the pods the floor is too
// low for. In a cluster that places pods, some node is nearly full at any time, and the
// floor, which holds on every node, drops below most pods. The spare floor holds on
// every node but a few, named by their NodeInfo's generation: the scheduler gives a
// NodeInfo a new generation, from one counter for all nodes, whenever its pods or its
// Node object change. A node still of a generation up to gen has the free capacity it
// had when the spare floor was computed, so Filter passes it without finding its record
// or free capacity, unless it is set aside; every other node is filtered in full. No
// event voids the spare floor: what it says of a node stays true for that generation,
// and only a NodeTopology changed (the topology version) retires it.
type spare struct {
	// one and together are as floor's, over the nodes not set aside.
	one, together Request
	// lowOne and lowTogether are the generations, sorted, of the nodes set aside:
	// those below one (or together), those without NUMA nodes, and, for one, those
	// that do not pin pods.
	lowOne, lowTogether []int64
	// gen is the highest generation among the nodes it was computed from.
	gen      int64
	topology uint64
	changes  uint64
	at       time.Time
}

// fastPath is what Filter and Score need of the spare floor for one pod: which nodes
// they may pass without a look.
type fastPath struct {
	gen int64
	low []int64
	// one: the pod fits one NUMA node of each such node, so Score would rank them all
	// as one NUMA node at distance 0.
	one bool
}

// covers reports whether the spare floor holds for the node of generation gen.
func (p *fastPath) covers(gen int64) bool {
	if p == nil || gen > p.gen {
		return false
	}
	_, low := slices.BinarySearch(p.low, gen)
	return !low
}

// nodeRoom is one node's free capacity as the floors count it.
type nodeRoom struct {
	gen           int64
	one, together Request
	unpinned      bool
}

// spareSetAside is the share of the nodes the spare floor may set aside: kube-scheduler
// looks at a tenth of a large cluster per pod, and at most one in eight of them is then
// filtered in full for a pod the spare floor holds.
const spareSetAside = 8

// spareFloor returns the floor of the nodes of room that use says count, with the
// roomiest ones kept until at most one in spareSetAside is set aside, and the sorted
// generations of the nodes set aside, added to low. Nodes are ranked by the smaller
// side of their room, as roomiest ranks NUMA nodes.
func spareFloor(room []nodeRoom, low []int64, use func(*nodeRoom) (Request, bool)) (Request, []int64) {
	side := func(r Request) int64 { return min(r.MilliCPU, r.Memory/bytesPerMilliCPU) }
	sides := make([]int64, 0, len(room))
	for i := range room {
		if r, ok := use(&room[i]); ok {
			sides = append(sides, side(r))
		}
	}
	floor := Request{MilliCPU: math.MaxInt64, Memory: math.MaxInt64}
	if len(sides) == 0 {
		slices.Sort(low)
		return floor, low
	}
	slices.Sort(sides)
	cut := sides[len(sides)/spareSetAside]
	for i := range room {
		r, ok := use(&room[i])
		switch {
		case !ok:
		case side(r) < cut:
			low = append(low, room[i].gen)
		default:
			floor = lowest(floor, r)
		}
	}
	slices.Sort(low)
	return floor, low
}

// spareFor returns the spare floor of the snapshot whose node list is nodes, computing
// it (with the floor) when there is none for the current topology version, or it is
// older than spareRefresh and a share of the nodes may have been given pods since
// (spareStale), but not more often than every floorRetry. An older one still holds
// where it says it does, for fewer nodes.
func (pl *NUMAAware) spareFor(nodes []fwk.NodeInfo) *spare {
	if pl.nodes == nil || len(nodes) == 0 {
		return nil
	}
	now := pl.now()
	k := &pl.floor
	sp := k.spare.Load()
	if sp != nil && sp.topology != pl.nodes.TopologyVersion() {
		sp = nil
	}
	stale := sp == nil || now.Sub(sp.at) >= spareRefresh && k.changes.Load()-sp.changes >= uint64(len(nodes)/spareStale+1)
	if stale && now.Sub(k.tried) >= floorRetry {
		pl.recomputeFloor(nodes, now)
		if sp = k.spare.Load(); sp.topology != pl.nodes.TopologyVersion() {
			return nil
		}
	}
	return sp
}

// lowerFloor lowers the floor to what the node whose free capacity was free keeps in
// its roomiest NUMA node once req is taken from the NUMA nodes in taken, split evenly
// among them as FreeCapacity counts it, and the together floor to what its NUMA nodes
// keep together: less all of req, which is no less than the even split takes.
func (pl *NUMAAware) lowerFloor(free []Free, taken []int32, req Request) {
	pl.floor.changes.Add(1)
	f := pl.floor.cur.Load()
	if f == nil || len(taken) == 0 {
		return
	}
	k := int64(len(taken))
	p := roomiest(free, taken, Request{MilliCPU: req.MilliCPU / k, Memory: req.Memory / k})
	all := total(free)
	all.MilliCPU -= req.MilliCPU
	all.Memory -= req.Memory
	if f.one.within(p) && f.together.within(all) {
		return
	}
	lowered := *f
	lowered.one, lowered.together = lowest(f.one, p), lowest(f.together, all)
	pl.floor.cur.Store(&lowered)
}

// bytesPerMilliCPU weighs memory against CPU when roomiest compares NUMA nodes: 4 MiB
// per millicore, 4 GiB per CPU, about what servers have.
const bytesPerMilliCPU = 4 << 20

// roomiest returns the free capacity of the NUMA node whose smaller side (CPU or memory,
// memory counted in CPUs at bytesPerMilliCPU) is largest, once share is taken from each
// NUMA node in taken: the floor takes one NUMA node per node, and a balanced one keeps
// it high on both sides. Zero for none.
func roomiest(free []Free, taken []int32, share Request) Request {
	var best Request
	bestSide := int64(math.MinInt64)
	for _, f := range free {
		r := Request{MilliCPU: f.MilliCPU, Memory: f.Memory}
		if slices.Contains(taken, f.ID) {
			r.MilliCPU -= share.MilliCPU
			r.Memory -= share.Memory
		}
		if side := min(r.MilliCPU, r.Memory/bytesPerMilliCPU); side > bestSide {
			best, bestSide = r, side
		}
	}
	return best
}

// voidFloorOnPod voids the floor when a pod asking for CPU or memory newly shows up
// bound to a node without this plugin's reservation for it there, or when a bound
// pod's NUMA annotation changes: either takes capacity the floor does not know of.
func (pl *NUMAAware) voidFloorOnPod(old, pod *v1.Pod) {
	if pod.Spec.NodeName == "" || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return
	}
	if old != nil && old.Spec.NodeName == pod.Spec.NodeName &&
		old.Annotations[annotations.NUMANodes] == pod.Annotations[annotations.NUMANodes] {
		return
	}
	if _, held := pl.ledger.Get(pod.UID, pod.Spec.NodeName); held {
		return
	}
	if PodRequest(pod).IsZero() {
		return
	}
	pl.floor.void()
}

// floorHandler feeds voidFloorOnPod from the scheduler's pod informer.
func (pl *NUMAAware) floorHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*v1.Pod); ok {
				pl.voidFloorOnPod(nil, pod)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, _ := oldObj.(*v1.Pod)
			if pod, ok := newObj.(*v1.Pod); ok {
				pl.voidFloorOnPod(old, pod)
			}
		},
	}
}

// anyOf reports whether nodes holds one of few.
func anyOf(nodes, few []fwk.NodeInfo) bool {
	for _, ni := range nodes {
		if slices.Contains(few, ni) {
			return true
		}
	}
	return false
}
