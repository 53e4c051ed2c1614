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
)

// Request is a pod's CPU (millicores) and memory (bytes) request.
type Request struct {
	MilliCPU int64
	Memory   int64
}

// IsZero says the pod asks for neither CPU nor memory.
func (r Request) IsZero() bool { return r.MilliCPU <= 0 && r.Memory <= 0 }

// within reports whether r asks for no more than room has, CPU and memory.
func (r Request) within(room Request) bool {
	return r.MilliCPU <= room.MilliCPU && r.Memory <= room.Memory
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
	// Distance is the sum of the pairwise NUMA distances of Nodes (0 for one node).
	Distance int64
}

// maxExhaustiveNUMANodes caps the subset search: up to 12 NUMA nodes every subset is
// tried (4095 at most, ~255 for the usual ≤ 8); beyond that a greedy choice is used.
const maxExhaustiveNUMANodes = 12

// BestChoice returns the smallest set of NUMA nodes whose free CPU and memory together
// cover req, ties broken by the smallest sum of pairwise distances, then by the lowest
// IDs. ok is false when even all NUMA nodes together do not cover req.
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
	n := len(free)
	if n == 0 {
		return Choice{}, false
	}
	// One NUMA node that fits is the best choice at any size, greedy or not.
	if ch, ok := singleChoice(free, req); ok {
		return ch, true
	}
	if n > maxExhaustiveNUMANodes {
		return greedyChoice(free, dists.get(free), req)
	}
	var dist [][]int64 // built on first need
	// Upper bounds per set size, to skip sizes that cannot possibly fit.
	var cpuBuf, memBuf [maxExhaustiveNUMANodes]int64
	cpus, mems := cpuBuf[:n], memBuf[:n]
	for i, f := range free {
		cpus[i], mems[i] = f.MilliCPU, f.Memory
	}
	slices.SortFunc(cpus, func(a, b int64) int { return cmp.Compare(b, a) })
	slices.SortFunc(mems, func(a, b int64) int { return cmp.Compare(b, a) })
	topCPU, topMem := cpus[0], mems[0]
	for k := 2; k <= n; k++ {
		topCPU += cpus[k-1]
		topMem += mems[k-1]
		if topCPU < req.MilliCPU || topMem < req.Memory {
			continue
		}
		// The subset search allocates nothing: the current and the best set live on the
		// stack, and the IDs are built once, for the winner.
		var setBuf, bestBuf [maxExhaustiveNUMANodes]int
		set, bestSet := firstSubset(setBuf[:k]), bestBuf[:k]
		var bestDist int64
		found := false
		for ok := true; ok; ok = nextSubset(set, n) {
			var c, m int64
			for _, i := range set {
				c += free[i].MilliCPU
				m += free[i].Memory
			}
			if c < req.MilliCPU || m < req.Memory {
				continue
			}
			if dist == nil {
				dist = dists.get(free)
			}
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

// singleChoice is BestChoice when one NUMA node covers req: every single NUMA node has
// distance 0, so the first that fits is the answer (the lowest ID: FreeCapacity returns
// them in ID order), found without building sets. Most pods fit one NUMA node. ok is
// false when none does.
func singleChoice(free []Free, req Request) (Choice, bool) {
	for _, f := range free {
		if f.MilliCPU >= req.MilliCPU && f.Memory >= req.Memory {
			return Choice{Nodes: oneNUMANode(f.ID)}, true
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

// greedyChoice takes NUMA nodes by most free CPU, then memory, until req is covered.
func greedyChoice(free []Free, dist [][]int64, req Request) (Choice, bool) {
	order := make([]int, len(free))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		fa, fb := free[order[a]], free[order[b]]
		if fa.MilliCPU != fb.MilliCPU {
			return fa.MilliCPU > fb.MilliCPU
		}
		return fa.Memory > fb.Memory
	})
	var c, m int64
	var set []int
	for _, i := range order {
		set = append(set, i)
		c += free[i].MilliCPU
		m += free[i].Memory
		if c >= req.MilliCPU && m >= req.Memory {
			slices.Sort(set)
			return Choice{Nodes: ids(free, set), Distance: setDistance(dist, set)}, true
		}
	}
	return Choice{}, false
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

func setDistance(dist [][]int64, set []int) int64 {
	var sum int64
	for a := 0; a < len(set); a++ {
		for b := a + 1; b < len(set); b++ {
			sum += dist[set[a]][set[b]]
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
