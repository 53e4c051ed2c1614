package numa

import (
	"cmp"
	"math/bits"
	"slices"
	"sort"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/numahint"
)

// Request is what a pod asks of a node's NUMA nodes: CPU (millicores), memory (bytes)
// and devices of each kind (from the device provider, see numahint).
type Request struct {
	MilliCPU int64
	Memory   int64
	Devices  numahint.Counts
}

// IsZero says the pod asks for neither CPU, memory nor devices.
func (r Request) IsZero() bool { return r.MilliCPU <= 0 && r.Memory <= 0 && r.Devices.IsZero() }

// within reports whether r asks for no more than room has, of every resource.
func (r Request) within(room Request) bool {
	return r.MilliCPU <= room.MilliCPU && r.Memory <= room.Memory && devicesWithin(r.Devices, room.Devices)
}

func devicesWithin(want, have numahint.Counts) bool {
	for k := range want {
		if want[k] > have[k] {
			return false
		}
	}
	return true
}

// lowest is the smaller of a and b, CPU and memory each.
func lowest(a, b Request) Request {
	return Request{MilliCPU: min(a.MilliCPU, b.MilliCPU), Memory: min(a.Memory, b.Memory)}
}

// PodRequest sums the pod's CPU and memory requests the way kube-scheduler does:
// containers summed, init containers by their maximum (restartable ones added), pod
// overhead and pod-level resources honored.
func PodRequest(pod *v1.Pod) Request {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return Request{MilliCPU: reqs.Cpu().MilliValue(), Memory: reqs.Memory().Value()}
}

// podInfoRequest is the request of a pod already on a node as the scheduler cached it
// when it added the pod to the NodeInfo (same feature-gate handling as NodeResourcesFit),
// so it is not recomputed for every node of every cycle.
func podInfoRequest(pi fwk.PodInfo) Request {
	r := pi.CalculateResource().Resource
	if r == nil {
		return PodRequest(pi.GetPod())
	}
	return Request{MilliCPU: r.GetMilliCPU(), Memory: r.GetMemory()}
}

// Free is what one NUMA node can still give.
type Free struct {
	ID       int32
	MilliCPU int64
	Memory   int64
	// Devices are its healthy, unallocated devices of each kind.
	Devices numahint.Counts
}

// covers reports whether f alone holds req.
func (f *Free) covers(req Request) bool {
	return f.MilliCPU >= req.MilliCPU && f.Memory >= req.Memory && devicesWithin(req.Devices, f.Devices)
}

// FreeCapacity is the topology's capacity per NUMA node minus what the node's pods and
// its kubelet take there, in NUMA node ID order. Values are floored at 0.
//
//   - A pod annotated with k NUMA nodes of the topology, or reserved by this plugin on
//     them (reserved), takes 1/k of its CPU and memory requests from each: the agent
//     confines it to them, and the kubelet's split among them is not visible to the
//     scheduler, so an even split is the neutral estimate.
//   - Every other pod that has not finished runs wherever the kernel puts it: pods of
//     other schedulers, DaemonSets, and pods whose annotation the agent refuses
//     (malformed, or naming a NUMA node the topology lacks). Its requests are spread
//     over all NUMA nodes, CPU in proportion to their CPUs and memory to their memory.
//   - What the kubelet holds back (node capacity − allocatable, when node is given) is
//     spread the same way.
func FreeCapacity(topo *v1alpha1.NodeTopology, node *v1.Node, pods []fwk.PodInfo, reserved func(*v1.Pod) ([]int32, Request, bool)) []Free {
	free := make([]Free, 0, len(topo.Status.NUMANodes))
	index := make(map[int32]int, len(topo.Status.NUMANodes))
	for _, n := range topo.Status.NUMANodes {
		index[n.ID] = len(free)
		free = append(free, Free{ID: n.ID, MilliCPU: int64(len(n.CPUs)) * 1000, Memory: n.MemoryBytes})
	}
	spread := kubeletReserved(node)
	var buf [8]int32
	for _, pi := range pods {
		pod := pi.GetPod()
		if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue
		}
		var ids []int32
		var req Request
		if value, ok := pod.Annotations[annotations.NUMANodes]; ok {
			parsed, err := annotations.AppendNUMANodes(buf[:0], value)
			if err != nil {
				klog.V(4).InfoS("Counting a pod with a malformed NUMA annotation as unpinned", "pod", klog.KObj(pod), "err", err)
			}
			ids, req = parsed, podInfoRequest(pi)
		} else if reserved != nil {
			var ok bool
			if ids, req, ok = reserved(pod); !ok {
				req = podInfoRequest(pi)
			}
		} else {
			req = podInfoRequest(pi)
		}
		if !allKnown(ids, index) {
			spread.MilliCPU += req.MilliCPU
			spread.Memory += req.Memory
			continue
		}
		k := int64(len(ids))
		for _, id := range ids {
			i := index[id]
			free[i].MilliCPU -= req.MilliCPU / k
			free[i].Memory -= req.Memory / k
		}
	}
	if spread.MilliCPU > 0 || spread.Memory > 0 {
		var cpus, mem int64
		for _, n := range topo.Status.NUMANodes {
			cpus += int64(len(n.CPUs))
			mem += max(n.MemoryBytes, 0)
		}
		for i, n := range topo.Status.NUMANodes {
			free[i].MilliCPU -= proportion(spread.MilliCPU, int64(len(n.CPUs)), cpus)
			free[i].Memory -= proportion(spread.Memory, max(n.MemoryBytes, 0), mem)
		}
	}
	for i := range free {
		free[i].MilliCPU = max(free[i].MilliCPU, 0)
		free[i].Memory = max(free[i].Memory, 0)
	}
	sort.Slice(free, func(a, b int) bool { return free[a].ID < free[b].ID })
	return free
}

// allKnown reports whether ids is a non-empty set of NUMA nodes the topology has, i.e.
// whether the agent pins a pod annotated with them.
func allKnown(ids []int32, index map[int32]int) bool {
	if len(ids) == 0 {
		return false
	}
	for _, id := range ids {
		if _, ok := index[id]; !ok {
			return false
		}
	}
	return true
}

// kubeletReserved is the CPU and memory the kubelet keeps from pods on node (system and
// kube reserved, the eviction threshold): capacity − allocatable. Zero without a node.
func kubeletReserved(node *v1.Node) Request {
	if node == nil {
		return Request{}
	}
	capacity, allocatable := node.Status.Capacity, node.Status.Allocatable
	return Request{
		MilliCPU: max(capacity.Cpu().MilliValue()-allocatable.Cpu().MilliValue(), 0),
		Memory:   max(capacity.Memory().Value()-allocatable.Memory().Value(), 0),
	}
}

// proportion is total·part/whole, rounded up so that what is spread is never
// understated, without overflow: memory totals times memory sizes exceed int64.
func proportion(total, part, whole int64) int64 {
	if total <= 0 || part <= 0 || whole <= 0 {
		return 0
	}
	part = min(part, whole)
	hi, lo := bits.Mul64(uint64(total), uint64(part))
	q, r := bits.Div64(hi, lo, uint64(whole)) // hi < whole since part ≤ whole and total < 2^63
	if r != 0 {
		q++
	}
	return int64(q)
}

// Choice is a set of NUMA nodes chosen for a pod on one node.
type Choice struct {
	// Nodes are the NUMA node IDs, ascending. They may be shared: do not modify them.
	Nodes []int32
	// Distance is setDistance of Nodes (0 for one NUMA node, whose only distance, to
	// itself, is the same everywhere).
	Distance int64
}

// maxExhaustiveNUMANodes caps the exact search. Up to 12 NUMA nodes every subset of
// each size a per-resource bound leaves reachable is tried: at most 4095 sets, each
// checked in O(size) and its distance in O(size²), and at most 255 on the usual ≤ 8
// NUMA nodes; the first size with a covering set ends the search. Beyond 12 NUMA nodes a
// greedy choice is used (greedyChoice), in O(n²).
const maxExhaustiveNUMANodes = 12

// BestChoice returns the smallest set of NUMA nodes whose free CPU, memory and devices
// of each kind together cover req, ties broken by the smallest average distance over
// all ordered pairs of the set (setDistance), then by the lowest IDs. ok is false when
// even all NUMA nodes together do not cover req.
func BestChoice(topo *v1alpha1.NodeTopology, free []Free, req Request) (Choice, bool) {
	return bestChoice(free, req, lazyDistances{topo: topo})
}

// lazyDistances is the distance matrix of a node's NUMA nodes (indexed like its free
// capacity), built on first need and, with a cache, kept: most choices never need it,
// and one node's matrix serves every pod until the node changes.
type lazyDistances struct {
	topo  *v1alpha1.NodeTopology
	cache *atomic.Pointer[[][]int64]
}

func (l lazyDistances) get(free []Free) [][]int64 {
	if l.cache != nil {
		if d := l.cache.Load(); d != nil {
			return *d
		}
	}
	d := distances(l.topo, free)
	if l.cache != nil {
		l.cache.Store(&d)
	}
	return d
}

func bestChoice(free []Free, req Request, dists lazyDistances) (Choice, bool) {
	return choiceWith(free, req, nil, dists)
}

// choiceWith is bestChoice among the sets that hold must (indexes into free, ascending:
// the NUMA nodes a pod's DRA devices sit on).
func choiceWith(free []Free, req Request, must []int, dists lazyDistances) (Choice, bool) {
	n := len(free)
	if n == 0 {
		return Choice{}, false
	}
	// One NUMA node that fits is the best choice at any size, greedy or not.
	switch len(must) {
	case 0:
		if ch, ok := singleChoice(free, req); ok {
			return ch, true
		}
	case 1:
		if free[must[0]].covers(req) {
			return Choice{Nodes: oneNUMANode(free[must[0]].ID)}, true
		}
	}
	if n > maxExhaustiveNUMANodes {
		return greedyChoiceFrom(free, dists.get(free), req, must)
	}
	var dist [][]int64 // built on first need
	// Upper bounds per set size, one per resource the pod asks for: the k largest free
	// amounts of each summed. Sizes no set can reach are skipped without enumerating.
	var bounds sizeBounds
	bounds.init(free, req)
	for k := max(2, len(must)); k <= n; k++ {
		if !bounds.reachable(k) {
			continue
		}
		// The subset search allocates nothing: the current and the best set live on the
		// stack, and the IDs are built once, for the winner.
		var setBuf, bestBuf [maxExhaustiveNUMANodes]int
		set, bestSet := firstSubset(setBuf[:k]), bestBuf[:k]
		var bestDist int64
		found := false
		for ok := true; ok; ok = nextSubset(set, n) {
			if !holds(set, must) || !setCovers(free, set, req) {
				continue
			}
			if dist == nil {
				dist = dists.get(free)
			}
			// Strictly smaller only: subsets come in lexicographic order, so on a tie the
			// lowest IDs stay.
			if d := setDistance(dist, set); !found || d < bestDist {
				bestDist, found = d, true
				copy(bestSet, set)
			}
		}
		if found {
			return Choice{Nodes: ids(free, bestSet), Distance: bestDist}, true
		}
	}
	return Choice{}, false
}

// setCovers reports whether the NUMA nodes of set (indexes into free) together hold req.
func setCovers(free []Free, set []int, req Request) bool {
	var sum Request
	for _, i := range set {
		sum.MilliCPU += free[i].MilliCPU
		sum.Memory += free[i].Memory
		for k, c := range free[i].Devices {
			sum.Devices[k] += c
		}
	}
	return req.within(sum)
}

// sizeBounds holds, per resource the request asks for, the free amounts of the NUMA
// nodes in descending order; the sum of the first k bounds what any k NUMA nodes hold.
// It lives on the stack: the exhaustive search has at most maxExhaustiveNUMANodes.
type sizeBounds struct {
	req Request
	n   int
	// sorted[0] is CPU, sorted[1] memory, sorted[2+k] devices of kind k.
	sorted [2 + numahint.Kinds][maxExhaustiveNUMANodes]int64
	asked  [2 + numahint.Kinds]bool
}

func (b *sizeBounds) init(free []Free, req Request) {
	b.req, b.n = req, len(free)
	b.asked[0], b.asked[1] = req.MilliCPU > 0, req.Memory > 0
	for k, want := range req.Devices {
		b.asked[2+k] = want > 0
	}
	for r := range b.sorted {
		if !b.asked[r] {
			continue
		}
		col := b.sorted[r][:b.n]
		for i := range free {
			col[i] = amount(&free[i], r)
		}
		slices.SortFunc(col, func(a, b int64) int { return cmp.Compare(b, a) })
	}
}

// amount is resource r of f, numbered as in sizeBounds.sorted.
func amount(f *Free, r int) int64 {
	switch r {
	case 0:
		return f.MilliCPU
	case 1:
		return f.Memory
	default:
		return f.Devices[r-2]
	}
}

// reachable reports whether some k NUMA nodes could hold the request, by each resource
// alone.
func (b *sizeBounds) reachable(k int) bool {
	for r := range b.sorted {
		if !b.asked[r] {
			continue
		}
		var sum int64
		for _, v := range b.sorted[r][:k] {
			sum += v
		}
		want := b.req.MilliCPU
		switch {
		case r == 1:
			want = b.req.Memory
		case r >= 2:
			want = b.req.Devices[r-2]
		}
		if sum < want {
			return false
		}
	}
	return true
}

// singleChoice is BestChoice when one NUMA node covers req: a single NUMA node's
// distance to itself is the same on every NUMA node (10, by the ACPI SLIT's definition),
// so the first that fits is the answer (the lowest ID: FreeCapacity returns them in ID
// order), found without building sets. Most pods fit one NUMA node. ok is false when
// none does.
func singleChoice(free []Free, req Request) (Choice, bool) {
	for i := range free {
		if free[i].covers(req) {
			return Choice{Nodes: oneNUMANode(free[i].ID)}, true
		}
	}
	return Choice{}, false
}

// oneNUMANodeIDs are the one-element ID lists of single-NUMA-node choices, shared so
// that the common choice allocates nothing: Choice.Nodes is read-only everywhere.
var oneNUMANodeIDs = func() (ids [64][1]int32) {
	for i := range ids {
		ids[i][0] = int32(i)
	}
	return ids
}()

func oneNUMANode(id int32) []int32 {
	if id >= 0 && int(id) < len(oneNUMANodeIDs) {
		return oneNUMANodeIDs[id][:]
	}
	return []int32{id}
}

// greedyChoice is BestChoice beyond maxExhaustiveNUMANodes: it starts from the NUMA
// node that holds the most of the request and adds, one at a time, the one that holds
// the most of what is still missing, ties by the smallest distance to the set so far,
// then the lowest ID. Each step weighs a resource by the share of the request it covers,
// so CPU, memory and each device kind count alike. It takes O(n²) steps for n NUMA
// nodes, and its set is not always the smallest.
func greedyChoice(free []Free, dist [][]int64, req Request) (Choice, bool) {
	return greedyChoiceFrom(free, dist, req, nil)
}

// greedyChoiceFrom is greedyChoice starting from the set start (indexes into free)
// instead of from nothing.
func greedyChoiceFrom(free []Free, dist [][]int64, req Request, start []int) (Choice, bool) {
	taken := make([]bool, len(free))
	set := slices.Clone(start)
	var have Request
	for _, i := range set {
		taken[i] = true
		have.MilliCPU += free[i].MilliCPU
		have.Memory += free[i].Memory
		for k, c := range free[i].Devices {
			have.Devices[k] += c
		}
	}
	if len(set) > 0 && req.within(have) {
		slices.Sort(set)
		return Choice{Nodes: ids(free, set), Distance: setDistance(dist, set)}, true
	}
	for len(set) < len(free) {
		best, bestGain, bestDist := -1, -1.0, int64(0)
		for i := range free {
			if taken[i] {
				continue
			}
			gain := coverGain(have, free[i], req)
			var d int64
			for _, j := range set {
				d += dist[i][j]
			}
			if gain > bestGain || gain == bestGain && d < bestDist {
				best, bestGain, bestDist = i, gain, d
			}
		}
		taken[best] = true
		set = append(set, best)
		have.MilliCPU += free[best].MilliCPU
		have.Memory += free[best].Memory
		for k, c := range free[best].Devices {
			have.Devices[k] += c
		}
		if req.within(have) {
			slices.Sort(set)
			return Choice{Nodes: ids(free, set), Distance: setDistance(dist, set)}, true
		}
	}
	return Choice{}, false
}

// coverGain is how much of what have still lacks of req the NUMA node f would add, as
// a sum of shares of the request, one per resource.
func coverGain(have Request, f Free, req Request) float64 {
	share := func(have, add, want int64) float64 {
		if want <= 0 || have >= want {
			return 0
		}
		return float64(min(add, want-have)) / float64(want)
	}
	g := share(have.MilliCPU, f.MilliCPU, req.MilliCPU) + share(have.Memory, f.Memory, req.Memory)
	for k, want := range req.Devices {
		g += share(have.Devices[k], f.Devices[k], want)
	}
	return g
}

// distances returns the distance matrix indexed like free. Distances are listed in
// NUMA node ID order; missing entries count as 0 so they do not decide ties.
func distances(topo *v1alpha1.NodeTopology, free []Free) [][]int64 {
	sorted := make([]int32, 0, len(topo.Status.NUMANodes))
	byID := make(map[int32]v1alpha1.NUMANode, len(topo.Status.NUMANodes))
	for _, n := range topo.Status.NUMANodes {
		sorted = append(sorted, n.ID)
		byID[n.ID] = n
	}
	slices.Sort(sorted)
	pos := make(map[int32]int, len(sorted))
	for i, id := range sorted {
		pos[id] = i
	}
	d := make([][]int64, len(free))
	for i, fi := range free {
		d[i] = make([]int64, len(free))
		row := byID[fi.ID].Distances
		for j, fj := range free {
			if p := pos[fj.ID]; p < len(row) {
				d[i][j] = int64(row[p])
			}
		}
	}
	return d
}

// setDistance is the sum of the NUMA distances over all ordered pairs of set, the
// diagonal included: |set|² times the average distance that scheduler-plugins'
// LeastNUMANodes and the kubelet's prefer-closest-numa-nodes compare, so among sets of
// one size it orders them alike.
func setDistance(dist [][]int64, set []int) int64 {
	var sum int64
	for _, a := range set {
		for _, b := range set {
			sum += dist[a][b]
		}
	}
	return sum
}

func ids(free []Free, set []int) []int32 {
	var mask uint
	for _, s := range set {
		id := free[s].ID
		if id < 0 || int(id) >= sharedSetIDs {
			mask = 0
			break
		}
		mask |= 1 << id
	}
	// A malformed NodeTopology may list an ID twice; its sets keep their length.
	if mask != 0 && bits.OnesCount(mask) == len(set) {
		return numaNodeSets[mask]
	}
	out := make([]int32, len(set))
	for i, s := range set {
		out[i] = free[s].ID
	}
	return out
}

// sharedSetIDs bounds the NUMA node IDs whose sets are shared: every set of IDs below it
// has one read-only ID list (numaNodeSets, by bit mask), so a choice of several NUMA
// nodes, which Filter makes for every node a large pod is checked on, allocates nothing.
const sharedSetIDs = 8

var numaNodeSets = func() (sets [1 << sharedSetIDs][]int32) {
	for mask := 1; mask < len(sets); mask++ {
		for id := range sharedSetIDs {
			if mask&(1<<id) != 0 {
				sets[mask] = append(sets[mask], int32(id))
			}
		}
		sets[mask] = slices.Clip(sets[mask])
	}
	return sets
}()

// firstSubset sets set to the first k-subset of [0,n) in lexicographic order, k =
// len(set), and returns it.
func firstSubset(set []int) []int {
	for i := range set {
		set[i] = i
	}
	return set
}

// nextSubset advances set to the next k-subset of [0,n) in lexicographic order; false
// when set was the last.
func nextSubset(set []int, n int) bool {
	k := len(set)
	i := k - 1
	for i >= 0 && set[i] == n-k+i {
		i--
	}
	if i < 0 {
		return false
	}
	set[i]++
	for j := i + 1; j < k; j++ {
		set[j] = set[j-1] + 1
	}
	return true
}
