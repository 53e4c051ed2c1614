package numa

import (
	"context"
	"fmt"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/numahint"
	"sextant.io/sextant/ranker/plugins/silence"
)

// Messages are fixed strings so the scheduler's FailedScheduling event can aggregate them
// over nodes.
const (
	msgNoTopology = "node(s) had no NodeTopology to check " + annotations.NUMAPolicy + ": single-numa-node against"
	msgNoPinning  = "node(s) do not pin pods to NUMA nodes (NodeTopology numaPinning neither Active nor Pending), which " +
		annotations.NUMAPolicy + ": single-numa-node needs"
	// msgSilentAgent: the agent that would pin is gone (silence.After), whatever its
	// NodeTopology's numaPinning still says.
	msgSilentAgent = "node(s) had no agent heartbeat (NodeBandwidth) within the last 2m0s: nothing pins pods to NUMA nodes there, which " +
		annotations.NUMAPolicy + ": single-numa-node needs"
)

// msgSingleNUMANode says which resource no single NUMA node of a node has enough of,
// or that each has some NUMA node but none has all; one fixed string per resource, so
// FailedScheduling still aggregates over nodes.
func msgSingleNUMANode(resource string) string {
	return "node(s) had no single NUMA node with enough free " + resource + " (" + annotations.NUMAPolicy + ": single-numa-node)"
}

// msgNoFit names the resource that all NUMA nodes of a node together lack; one fixed
// string per resource.
func msgNoFit(resource string) string {
	return "node(s) didn't have enough free " + resource + " in their NUMA nodes for the pod"
}

// shortResource names the resource that makes a single NUMA node fail: the first of
// cpu, memory and the device resources that no NUMA node has enough of alone, else all
// of them together.
func shortResource(free []Free, req Request) string {
	lacks := func(enough func(*Free) bool) bool {
		for i := range free {
			if enough(&free[i]) {
				return false
			}
		}
		return true
	}
	if lacks(func(f *Free) bool { return f.MilliCPU >= req.MilliCPU }) {
		return "cpu"
	}
	if lacks(func(f *Free) bool { return f.Memory >= req.Memory }) {
		return "memory"
	}
	for k, want := range req.Devices {
		if lacks(func(f *Free) bool { return f.Devices[k] >= want }) {
			return string(v1alpha1.RequestableDeviceKinds[k].ResourceName())
		}
	}
	if !req.Devices.IsZero() {
		return "cpu, memory and devices together"
	}
	return "cpu and memory together"
}

// Filter drops a node whose NUMA nodes together cannot give the pod its CPU and memory
// and, under single-numa-node, one where no single NUMA node can.
//
// A node without NodeTopology passes (NUMA is unknown there, NodeResourcesFit still
// applies) unless the pod's policy is single-numa-node: a hard requirement cannot be
// checked on such a node, so it is dropped. So is, under single-numa-node, a node whose
// agent does not pin pods (NodeTopology's numaPinning), or whose agent is silent
// (silence.After: no NodeBandwidth for 2 minutes, whatever numaPinning still says): the
// requirement would be written and not carried out. A silent node is
// UnschedulableAndUnresolvable, as DeviceAware has it: preempting pods there brings no
// agent back; the agent's first fresh report brings the pod back (reportArrived).
func (pl *NUMAAware) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, ok := readState(state)
	// The generation is read only for a pod on the spare floor: it is a cache line of
	// the NodeInfo that nothing else reads.
	if !ok || s.idle() || s.fast != nil && s.fast.covers(nodeInfo.GetGeneration()) {
		return nil
	}
	node := nodeInfo.Node()
	if node == nil {
		filterRejections.WithLabelValues(reasonNodeNotFound).Inc()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node not found")
	}
	nf, topo, ok := pl.numaFreeIn(state, s.req, node, nodeInfo)
	if !ok {
		if s.policy == annotations.PolicySingleNUMANode {
			filterRejections.WithLabelValues(reasonNoTopology).Inc()
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgNoTopology)
		}
		s.markUneven()
		return nil
	}
	if s.policy == annotations.PolicySingleNUMANode {
		if pl.silent(pl.nodes.NodeOf(node)) {
			filterRejections.WithLabelValues(silence.Reason).Inc()
			pl.silentNodes.Rejected(node.Name)
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgSilentAgent)
		}
		if !topo.Status.NUMAPinning.Pins() {
			filterRejections.WithLabelValues(reasonNoPinning).Inc()
			return fwk.NewStatus(fwk.Unschedulable, msgNoPinning)
		}
	}
	if s.claims != nil {
		return pl.filterClaims(ctx, s, nf, topo, node)
	}
	req := nf.effective(s.req, s.policy)
	switch reason, uneven := fit(nf.free(), req, s.policy); reason {
	case reasonNoFit:
		filterRejections.WithLabelValues(reason).Inc()
		return fwk.NewStatus(fwk.Unschedulable, msgNoFit(shortResource([]Free{totalFree(nf.free())}, req)))
	case reasonSingleNUMANode:
		filterRejections.WithLabelValues(reason).Inc()
		return fwk.NewStatus(fwk.Unschedulable, msgSingleNUMANode(shortResource(nf.free(), req)))
	default:
		if uneven {
			s.markUneven()
		}
		return nil
	}
}

// filterClaims is Filter for a pod with DRA claims: the best set that holds the NUMA
// nodes DynamicResources would put its devices on must cover the pod, and be one NUMA
// node under single-numa-node. A node DynamicResources cannot allocate on is left to it
// to refuse.
func (pl *NUMAAware) filterClaims(ctx context.Context, s *cycleState, nf *nodeFree, topo *v1alpha1.NodeTopology, node *v1.Node) *fwk.Status {
	p, err := s.claims.placement(ctx, node, topo)
	if err != nil {
		if ctx.Err() != nil {
			return stopped(ctx)
		}
		return fwk.AsStatus(fmt.Errorf("numa filter on node %s: predicting the DRA allocation: %w", node.Name, err))
	}
	if !p.allocatable {
		return nil
	}
	ch, ok, refusal, err := s.choose(ctx, nf, topo, node)
	switch {
	case err != nil && ctx.Err() != nil:
		return stopped(ctx)
	case err != nil:
		return fwk.AsStatus(err)
	case refusal != nil:
		return refusal
	case !ok:
		filterRejections.WithLabelValues(reasonNoFit).Inc()
		return fwk.NewStatus(fwk.Unschedulable, msgNoFit(shortResource([]Free{totalFree(nf.free())}, nf.effective(s.req, s.policy))))
	case s.policy == annotations.PolicySingleNUMANode && len(ch.Nodes) > 1:
		filterRejections.WithLabelValues(reasonSingleNUMANode).Inc()
		return fwk.NewStatus(fwk.Unschedulable, msgSingleNUMANode(shortResource(nf.free(), nf.effective(s.req, s.policy))))
	}
	if len(ch.Nodes) > 1 || ch.Distance != 0 {
		s.markUneven()
	}
	return nil
}

// stopped is Filter's answer once the framework has cancelled its context, which it
// does when it has found enough feasible nodes while other nodes' Filters still run: the
// node is left out, as DynamicResources leaves it, where an error would fail the pod's
// whole scheduling cycle.
func stopped(ctx context.Context) *fwk.Status {
	return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("numa filter asked by the scheduler to stop: %v", context.Cause(ctx)))
}

// fit is Filter's decision on a node with this free capacity per NUMA node: a rejection
// reason, or "" and whether the pod needs more than one NUMA node there. It needs only
// whether one NUMA node holds req and, if none does, whether all together do
// (BestChoice's ok): which set is best is Score's and Reserve's question, and searching
// it for every node would only slow the pass-or-fail answer down
// (docs/design/0011-numa-filter-asks-only-whether-it-fits.md).
func fit(free []Free, req Request, policy annotations.NUMAPolicyValue) (reason string, uneven bool) {
	if _, one := singleChoice(free, req); one {
		return "", false
	}
	if !fitsAll(free, req) {
		return reasonNoFit, false
	}
	if policy == annotations.PolicySingleNUMANode {
		return reasonSingleNUMANode, false
	}
	return "", true
}

// fitsAll reports whether all NUMA nodes together have req free: whether BestChoice
// finds any set at all.
func fitsAll(free []Free, req Request) bool {
	return req.within(total(free))
}

// totalFree is the free capacity of all NUMA nodes together, as one Free.
func totalFree(free []Free) Free {
	t := total(free)
	return Free{MilliCPU: t.MilliCPU, Memory: t.Memory, Devices: t.Devices}
}

// total is the free capacity of all NUMA nodes together.
func total(free []Free) Request {
	var sum Request
	for _, f := range free {
		sum.MilliCPU += f.MilliCPU
		sum.Memory += f.Memory
		for k, c := range f.Devices {
			sum.Devices[k] += c
		}
	}
	return sum
}

// markUneven sets uneven, reading first: Filter runs for hundreds of nodes at once, and
// writing a shared flag from each of them would contend for its cache line.
func (s *cycleState) markUneven() {
	if !s.uneven.Load() {
		s.uneven.Store(true)
	}
}

func hasNUMA(topo *v1alpha1.NodeTopology) bool {
	return topo != nil && len(topo.Status.NUMANodes) > 0
}

// nodeFree is one node's free capacity per NUMA node, in NUMA node ID order, and, on
// nodes of more than memoFromNUMANodes NUMA nodes, the last choice made from it.
// Filter, Score, DeviceAware and Reserve each ask for the same pod's choice on the same
// node; the memo answers all but the first without repeating a search of up to 4095
// sets or keeping a per-cycle map of every node.
type nodeFree struct {
	// unknown are the node's free devices whose NUMA node is unknown: they fit any set,
	// so choices and fits ask the NUMA nodes for the rest only (effective).
	unknown numahint.Counts
	// The free capacity is kept in the cache entry itself up to inlineNUMANodes NUMA
	// nodes (n of inline), else in spill: Filter reads it for every node of every pod,
	// and a separate array would be one more cache miss per node.
	n      int
	inline [inlineNUMANodes]Free
	spill  []Free
	last   atomic.Pointer[choiceMemo]
	// dist is the NUMA distance matrix, once a choice of several NUMA nodes needed it.
	dist atomic.Pointer[[][]int64]
}

// inlineNUMANodes is how many NUMA nodes' free capacity a nodeFree holds inline: most
// servers have one, two or four.
const inlineNUMANodes = 4

func newNodeFree(free []Free, unknown numahint.Counts) nodeFree {
	if len(free) > inlineNUMANodes {
		return nodeFree{n: len(free), spill: free, unknown: unknown}
	}
	var inline [inlineNUMANodes]Free
	copy(inline[:], free)
	return nodeFree{n: len(free), inline: inline, unknown: unknown}
}

// free is the node's free capacity per NUMA node, in NUMA node ID order. It points into
// nf: callers must not keep it beyond nf, nor modify it.
func (nf *nodeFree) free() []Free {
	if nf.spill != nil {
		return nf.spill
	}
	return nf.inline[:nf.n]
}

type choiceMemo struct {
	req    Request
	choice Choice
	fits   bool
}

// choose returns the best choice for req from this free capacity of a node whose
// topology is topo (BestChoice). The memo needs no other key: a nodeFree is only ever
// reached for one (NodeInfo generation, NodeTopology object), and BestChoice depends on
// nothing else.
func (nf *nodeFree) choose(topo *v1alpha1.NodeTopology, req Request, policy annotations.NUMAPolicyValue) (Choice, bool) {
	req = nf.effective(req, policy)
	// The common case, one NUMA node, is cheaper found again than remembered.
	free := nf.free()
	if ch, ok := singleChoice(free, req); ok {
		return ch, true
	}
	if len(free) <= memoFromNUMANodes {
		// A few subsets, searched without allocating, cost less than a memo allocated
		// for every node a large pod is checked on.
		return bestChoice(free, req, lazyDistances{topo: topo, cache: &nf.dist})
	}
	if m := nf.last.Load(); m != nil && m.req == req {
		return m.choice, m.fits
	}
	ch, fits := bestChoice(free, req, lazyDistances{topo: topo, cache: &nf.dist})
	nf.last.Store(&choiceMemo{req: req, choice: ch, fits: fits})
	return ch, fits
}

// effective is req less the devices of unknown NUMA node, which any set can take;
// under single-numa-node they count for none, since a device must be shown to sit on
// the pod's NUMA node.
func (nf *nodeFree) effective(req Request, policy annotations.NUMAPolicyValue) Request {
	if nf.unknown.IsZero() || req.Devices.IsZero() || policy == annotations.PolicySingleNUMANode {
		return req
	}
	for k := range req.Devices {
		req.Devices[k] = max(req.Devices[k]-nf.unknown[k], 0)
	}
	return req
}

// memoFromNUMANodes is the NUMA node count above which choose keeps its last choice: up
// to 4 NUMA nodes a search tries at most 11 sets of two or more.
const memoFromNUMANodes = 4

// free is the node's free capacity per NUMA node, counting this plugin's reservations
// for pods whose annotation is not visible yet. The result is shared: do not modify it.
//
// It is cached per (NodeInfo generation, NodeTopology object). The scheduler gives the
// NodeInfo a new generation when the Node object changes too, so a new allocatable
// (what the kubelet reserves) is seen at once. The ledger is not part
// of the key, and need not be: it is consulted only for a pod on the node without the
// annotation, and each change to such an entry comes with a new generation of the
// node: Reserve follows the scheduler's assume of the same pod, Unreserve precedes its
// forget, a deleted pod leaves the node, and an entry is dropped on the pod's update
// only once the pod carries the annotation, which then counts instead.
func (pl *NUMAAware) free(rec *heartbeat.Node, topo *v1alpha1.NodeTopology, nodeInfo fwk.NodeInfo) *nodeFree {
	return pl.freeCache.Get(rec, nodeInfo.GetGeneration(), topo, func() nodeFree {
		var devices func() (map[int32]numahint.Counts, numahint.Counts, bool)
		if dp := pl.deviceProvider(); dp != nil {
			// The provider's free devices are cached under the same key (NodeInfo
			// generation, NodeTopology object), so they change only with this value.
			devices = func() (map[int32]numahint.Counts, numahint.Counts, bool) { return dp.Free(nodeInfo) }
		}
		// The name is read here, on a miss only: it is outside the record's first cache
		// line.
		return pl.computeFree(rec.Name(), topo, nodeInfo, devices)
	})
}

// computeFree is the node's free capacity per NUMA node, with the free devices that
// devices reports (nil: none).
func (pl *NUMAAware) computeFree(node string, topo *v1alpha1.NodeTopology, nodeInfo fwk.NodeInfo, devices func() (map[int32]numahint.Counts, numahint.Counts, bool)) nodeFree {
	free := FreeCapacity(topo, nodeInfo.Node(), nodeInfo.GetPods(), func(p *v1.Pod) ([]int32, Request, bool) {
		r, ok := pl.ledger.Get(p.UID, node)
		return r.nodes, r.req, ok
	})
	var unknown numahint.Counts
	if devices != nil && len(topo.Status.PCIDevices) > 0 {
		if byNUMA, u, ok := devices(); ok {
			for i := range free {
				free[i].Devices = byNUMA[free[i].ID]
			}
			unknown = u
		}
	}
	return newNodeFree(free, unknown)
}

// simulatedDevices is a device provider whose free devices can differ in a copy of the
// cycle state: kube-scheduler's preemption dry run takes victims off a copy of the
// NodeInfo and tells the PreFilter extensions (DeviceAware's), while the NodeTopology
// still names the victims as holders of their devices. FreeIn's simulated is false
// when state holds no such change.
type simulatedDevices interface {
	FreeIn(state fwk.CycleState, nodeInfo fwk.NodeInfo) (byNUMA map[int32]numahint.Counts, unknown numahint.Counts, ok, simulated bool)
}

// numaFreeIn is numaFree as Filter sees the node in state: for a pod asking for
// devices, where the device provider simulates (simulatedDevices), the node's free
// capacity is computed anew with the provider's devices and not kept, since the
// cache's key does not tell a simulation from the plain state.
func (pl *NUMAAware) numaFreeIn(state fwk.CycleState, req Request, node *v1.Node, nodeInfo fwk.NodeInfo) (*nodeFree, *v1alpha1.NodeTopology, bool) {
	if !req.Devices.IsZero() {
		if dp, ok := pl.deviceProvider().(simulatedDevices); ok {
			if byNUMA, unknown, known, simulated := dp.FreeIn(state, nodeInfo); simulated {
				rec := pl.nodes.NodeOf(node)
				topo := rec.Topology()
				if topo == nil {
					return nil, nil, false
				}
				nf := pl.computeFree(rec.Name(), topo, nodeInfo, func() (map[int32]numahint.Counts, numahint.Counts, bool) {
					return byNUMA, unknown, known
				})
				return &nf, topo, nf.n > 0
			}
		}
	}
	return pl.numaFree(node, nodeInfo)
}

// numaFree returns the node's free capacity per NUMA node and its NodeTopology; ok is
// false when it has no NodeTopology or one without NUMA nodes. On a cache hit it does
// not read the NodeTopology object itself: in Filter, over many nodes, that object is a
// CPU cache miss for every node, and the cached value says as much.
// silent reports whether the node's agent has not been heard from within
// silence.After: no NodeBandwidth, or one that arrived too long ago. Its NUMA pinning
// is then not trusted: the pinning is the agent's to do.
func (pl *NUMAAware) silent(rec *heartbeat.Node) bool {
	return silence.Silent(rec.Bandwidth(), pl.now())
}

// pins reports whether pods annotated numa.sextant.io/nodes are pinned on the node whose
// record is rec and whose NodeTopology is topo: its agent says so and is heard from.
func (pl *NUMAAware) pins(rec *heartbeat.Node, topo *v1alpha1.NodeTopology) bool {
	return topo.Status.NUMAPinning.Pins() && !pl.silent(rec)
}

// reportArrived is the heartbeat store's NodeBandwidth listener: the first fresh report
// from a node Filter rejected as silent activates every waiting pod (see DeviceAware's).
func (pl *NUMAAware) reportArrived(node string, report *heartbeat.Bandwidth) {
	if pl.waiting != nil && pl.silentNodes.Heard(node, report, pl.now()) {
		pl.waiting.ActivateAll(node)
	}
}

func (pl *NUMAAware) numaFree(node *v1.Node, nodeInfo fwk.NodeInfo) (nf *nodeFree, topo *v1alpha1.NodeTopology, ok bool) {
	return pl.numaFreeOf(pl.nodes.NodeOf(node), nodeInfo)
}

// numaFreeOf is numaFree for the node whose record is rec.
func (pl *NUMAAware) numaFreeOf(rec *heartbeat.Node, nodeInfo fwk.NodeInfo) (nf *nodeFree, topo *v1alpha1.NodeTopology, ok bool) {
	if topo = rec.Topology(); topo == nil {
		return nil, nil, false
	}
	nf = pl.free(rec, topo, nodeInfo)
	return nf, topo, nf.n > 0
}
