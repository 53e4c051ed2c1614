// Package numa is the NUMAAware scheduler plugin: it makes one NUMA decision per pod and
// node, the smallest set of NUMA nodes whose free CPU, memory and devices of every
// requested kind together hold the pod (devices as DeviceAware reports them, see
// numahint), ranks nodes by it (fewer NUMA nodes better, ties by NUMA distance), can make
// "fits in one NUMA node" a hard filter, and puts the set on the pod's Binding
// (numa.sextant.io/nodes, staged in Reserve for SextantBinder, which the profile must
// bind with: the ranker does not write pods).
//
// Free capacity per NUMA node is the agent's NodeTopology (CPUs and memoryBytes of each
// NUMA node) minus what the pods already on the node and its kubelet take there. A pod
// that carries numa.sextant.io/nodes (which the agent pins it to), or that this plugin
// reserved and whose annotation is not visible yet, takes its CPU and memory requests
// split evenly over those NUMA nodes. Every other running pod (other schedulers',
// DaemonSets, a refused annotation's) and the kubelet's reservation (capacity −
// allocatable) are spread over all NUMA nodes in proportion to their CPUs and memory
// (FreeCapacity).
//
// Decisions:
//   - Pods asking for neither CPU nor memory are not filtered or scored (PreFilter and
//     PreScore return Skip) and get no annotation.
//   - Without the policy annotation a node is dropped only when all its NUMA nodes
//     together lack the free CPU or memory; otherwise fewer NUMA nodes only score higher.
//   - A node without NodeTopology passes Filter and gets the lowest NUMA score (0), since
//     nothing is known about its NUMA nodes; nothing is written for a pod placed there.
//     Under single-numa-node such a node is dropped: a hard requirement that cannot be
//     checked is not met.
//   - A node whose agent is silent (no NodeBandwidth for silence.After, 2 minutes, the
//     rule DeviceAware applies to devices) gets no NUMA decision: its NodeTopology's
//     numaPinning is not trusted, since the pinning is that agent's to do. A
//     single-numa-node pod is not placed there (UnschedulableAndUnresolvable, reason
//     silent_agent) until the agent's first fresh report brings it back; other pods may
//     be, without numa.sextant.io/nodes, as on a node that does not pin.
//   - The choice is the smallest set of NUMA nodes whose free CPU, memory and devices
//     together cover the request, ties by the smallest average NUMA distance over all
//     ordered pairs of the set (the diagonal included, as scheduler-plugins'
//     LeastNUMANodes and the kubelet's prefer-closest-numa-nodes), then lowest IDs.
//     Every subset is tried up to 12 NUMA nodes; beyond, a greedy choice is used.
//   - Devices of unknown NUMA node fit any set, except under single-numa-node, where a
//     device must be shown to sit on the pod's NUMA node.
//   - A NUMA node without memory gives a set its CPUs and devices; the set's memory must
//     come from its other NUMA nodes.
//   - Nominated pods (preemption in progress) count like any pod without the
//     annotation where the framework adds them to the node.
//   - When every node that passed Filter fits the pod in one NUMA node, Score is skipped:
//     the scores would all be equal and rank nothing. Most pods are such pods.
package numa

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/draclaims"
	"sextant.io/sextant/ranker/plugins/nodecache"
	"sextant.io/sextant/ranker/plugins/nodelookup"
	"sextant.io/sextant/ranker/plugins/numahint"
	"sextant.io/sextant/ranker/plugins/pluginargs"
	"sextant.io/sextant/ranker/plugins/podledger"
	"sextant.io/sextant/ranker/plugins/requeue"
	"sextant.io/sextant/ranker/plugins/silence"
)

// Name is the plugin's name in the scheduler configuration.
const Name = "NUMAAware"

// NUMAAware is the plugin.
type NUMAAware struct {
	nodes     nodelookup.Nodes
	nodeInfos nodelookup.NodeInfos
	// ledger holds the NUMA nodes Reserve took for pods whose numa.sextant.io/nodes is
	// not visible yet; FreeCapacity consults it only for pods without the annotation.
	ledger *podledger.Ledger[reservation]
	// freeCache holds each node's free capacity per NUMA node between cycles.
	freeCache *nodecache.Cache[*v1alpha1.NodeTopology, nodeFree]
	// floor is what one NUMA node, and all NUMA nodes together, of every node have free
	// at least (see floor).
	floor floorKeeper
	now   func() time.Time
	// handle finds the profile's device provider (numahint) once all plugins are built;
	// devices holds it from then on. Nil in both: the pod's devices are not NUMA-bound.
	handle  fwk.Handle
	devices atomic.Pointer[numahint.Provider]
	// waiting are the pods Filter rejected, brought back by any NodeTopology change and
	// by a silent node's agent being heard again; nil without a framework Handle.
	waiting  *requeue.Waiting
	snapshot func() ([]fwk.NodeInfo, error)
	// silentNodes are the nodes Filter rejected as silent and not heard from since.
	silentNodes silence.Nodes
	// dra predicts and reads back the allocations of pods' DRA claims; its Manager is
	// nil without DRA in the profile, and pods' claims are then not placed.
	dra draclaims.Allocator
}

// WithDevices makes p the source of the NUMA nodes' free devices and of pods' device
// requests, for plugins built without a framework handle (tests, embedding).
func (pl *NUMAAware) WithDevices(p numahint.Provider) *NUMAAware {
	pl.devices.Store(&p)
	return pl
}

// WithProfile makes the plugin find its device provider in numahint.Default under h,
// the handle of the profile it belongs to, as New does.
func (pl *NUMAAware) WithProfile(h fwk.Handle) *NUMAAware {
	pl.handle = h
	return pl
}

// deviceProvider returns the profile's device provider, nil when it has none.
func (pl *NUMAAware) deviceProvider() numahint.Provider {
	if p := pl.devices.Load(); p != nil {
		return *p
	}
	if pl.handle == nil {
		return nil
	}
	p := numahint.Default.Lookup(pl.handle)
	if p != nil {
		pl.devices.Store(&p)
	}
	return p
}

var (
	_ fwk.PreFilterPlugin   = &NUMAAware{}
	_ fwk.FilterPlugin      = &NUMAAware{}
	_ fwk.PreScorePlugin    = &NUMAAware{}
	_ fwk.ScorePlugin       = &NUMAAware{}
	_ fwk.ReservePlugin     = &NUMAAware{}
	_ fwk.PostFilterPlugin  = &NUMAAware{}
	_ fwk.EnqueueExtensions = &NUMAAware{}
	_ fwk.SignPlugin        = &NUMAAware{}
)

// New is the plugin factory for app.WithPlugin(numa.Name, numa.New). The plugin takes no
// arguments.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	if err := pluginargs.None(Name, obj); err != nil {
		return nil, err
	}
	registerMetrics()
	if h.KubeConfig() == nil {
		return nil, fmt.Errorf("numa plugin: the scheduler handle has no kubeconfig to watch NodeTopology with")
	}
	store, err := heartbeat.Shared(ctx, h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("numa plugin: %w", err)
	}
	pl := NewWith(store, nodelookup.Snapshot(h)).WithProfile(h)
	if h.SharedDRAManager() != nil {
		pl.dra = draAllocator(h)
	}
	pl.waiting = requeue.New(Name, h.Activate)
	pl.snapshot = h.SnapshotSharedLister().NodeInfos().List
	store.AddListener(pl.listener())
	if f := h.SharedInformerFactory(); f != nil {
		pods := f.Core().V1().Pods().Informer()
		if err := pl.ledger.ForgetOnPodEvents(pods, isAnnotated); err != nil {
			return nil, fmt.Errorf("numa plugin: watch pods for reservations: %w", err)
		}
		if _, err := pods.AddEventHandler(pl.floorHandler()); err != nil {
			return nil, fmt.Errorf("numa plugin: watch pods for the NUMA floor: %w", err)
		}
		if err := pl.waiting.WatchPods(pods); err != nil {
			return nil, fmt.Errorf("numa plugin: watch pods: %w", err)
		}
	}
	return pl, nil
}

// listener is what the heartbeat store tells NUMAAware: a changed NodeTopology may
// admit any waiting pod, and so may a silent agent's report, since an agent back from
// an outage rewrites its NodeTopology unchanged and the store tells no one of that.
// Call it once waiting is set.
func (pl *NUMAAware) listener() heartbeat.Listener {
	return heartbeat.Listener{Topology: pl.waiting.ActivateAll, Bandwidth: pl.reportArrived}
}

// NewWith builds the plugin from its parts, without a framework Handle (tests, embedding).
func NewWith(nodes nodelookup.Nodes, nodeInfos nodelookup.NodeInfos) *NUMAAware {
	registerMetrics()
	return &NUMAAware{nodes: nodes, nodeInfos: nodeInfos,
		ledger:    podledger.New[reservation](func(n int) { reservations.Set(float64(n)) }),
		freeCache: nodecache.New[*v1alpha1.NodeTopology, nodeFree](heartbeat.SlotNUMAFree),
		now:       time.Now}
}

// Name returns the plugin's name.
func (pl *NUMAAware) Name() string { return Name }

func isAnnotated(pod *v1.Pod) bool {
	_, ok := pod.Annotations[annotations.NUMANodes]
	return ok && pod.Spec.NodeName != ""
}

// stateKey is where the plugin keeps the pod's request, policy and reserved choice:
// numahint's key, since DeviceAware reads the choice there.
const stateKey = numahint.StateKey

// cycleState is the plugin's CycleState entry for one pod. Clones share it: nothing in
// it depends on which clone reads it, and reserved is written once, by Reserve.
type cycleState struct {
	// topologyVersion is the store's when PreFilter ran (see PostFilter).
	topologyVersion uint64
	req             Request
	policy          annotations.NUMAPolicyValue
	// pl lets Chosen, called by DeviceAware, compute the choice.
	pl       *NUMAAware
	reserved atomic.Pointer[reservedChoice]
	// uneven is set by Filter when a node it passes would not score as "one NUMA node,
	// distance 0": a choice of more NUMA nodes, or a node without NodeTopology (and by
	// PreScore when Filter was skipped, see bare; by PreFilter when Filter was skipped
	// for a pod within the together floor only). While it is unset every feasible node
	// scores the same, which ranks nothing, and PreScore skips Score.
	uneven atomic.Bool
	// bare are the snapshot's nodes without NodeTopology when PreFilter skipped Filter
	// (see floor): PreScore's question is then whether one of them is feasible.
	bare []fwk.NodeInfo
	// fast names the nodes Filter passes, and Score ranks, without a look (see spare);
	// nil when the spare floor is too low for the pod.
	fast *fastPath
	// claims are the pod's DRA claims, predicted on every node; nil for a pod without
	// any, and for one whose claims wait for Reserve (claimsAtReserve).
	claims *claims
	// claimsAtReserve is set for a pod with DRA claims, no NUMA policy and no
	// device-plugin devices: nothing about its devices decides whether a node fits it,
	// so they are not predicted node by node; Reserve reads where DynamicResources, whose
	// Reserve ran before, allocated them (chooseAtReserve).
	claimsAtReserve bool
}

// idle reports whether the plugin has nothing to decide for the pod: no CPU, memory or
// devices asked for, and no DRA claims whose devices place it.
func (s *cycleState) idle() bool { return s.req.IsZero() && s.claims == nil && !s.claimsAtReserve }

var _ numahint.Choice = (*cycleState)(nil)

func (s *cycleState) Clone() fwk.StateData { return s }

// reservedChoice is what Reserve took for the pod.
type reservedChoice struct {
	node   string
	choice Choice
}

func readState(state fwk.CycleState) (*cycleState, bool) {
	if state == nil {
		return nil, false
	}
	d, err := state.Read(stateKey)
	if err != nil {
		return nil, false
	}
	s, ok := d.(*cycleState)
	return s, ok
}

// Chosen implements numahint.Choice: NUMAAware's choice for the pod on the node, what
// DeviceAware prefers devices from.
func (s *cycleState) Chosen(nodeInfo fwk.NodeInfo) ([]int32, bool) {
	if s.idle() {
		return nil, false
	}
	node := nodeInfo.Node()
	if node == nil {
		return nil, false
	}
	if r := s.reserved.Load(); r != nil && r.node == node.Name {
		return r.choice.Nodes, true
	}
	nf, topo, ok := s.pl.numaFree(node, nodeInfo)
	if !ok {
		return nil, false
	}
	ch, ok, refusal, err := s.choose(context.Background(), nf, topo, node)
	if !ok || refusal != nil || err != nil || s.policy == annotations.PolicySingleNUMANode && len(ch.Nodes) > 1 {
		return nil, false // Filter rejects the node: there is no choice on it
	}
	return ch.Nodes, true
}

// Reserved implements numahint.Choice.
func (s *cycleState) Reserved(node string) ([]int32, bool) {
	if r := s.reserved.Load(); r != nil && r.node == node {
		return r.choice.Nodes, true
	}
	return nil, false
}
