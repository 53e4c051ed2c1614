// Package devices is the DeviceAware scheduler plugin, the scheduler half of the device-ID
// handshake: it keeps only nodes with enough healthy, unallocated devices of each kind the
// pod requests (extended resources sextant.io/<kind>), prefers nodes where those devices
// sit on the NUMA nodes NUMAAware chose for the pod, picks the exact device IDs in
// Reserve, and puts them on the pod's Binding (devices.sextant.io/allocated, staged for
// SextantBinder, which the profile must bind with: the ranker does not write pods).
//
// A device is allocated when its PCI address is listed in the
// devices.sextant.io/allocated annotation of a pod on the node, or reserved by this
// plugin for a pod whose annotation is not visible yet.
//
// Decisions:
//   - Only sextant.io/gpu, nic, nvme and accelerator are devices; other sextant.io/
//     resources are ignored here. A container that sets only a limit asks for the limit.
//   - A node without NodeTopology is dropped for pods asking for devices: no device IDs
//     can be named there (UnschedulableAndUnresolvable). Too few free devices is
//     Unschedulable, so preemption may free them: its dry run tells AddPod and RemovePod
//     which pods it takes off a copy of the node, and the holders the agent published
//     for those no longer count there.
//   - Devices of unknown NUMA locality never count as "on the chosen NUMA nodes". They
//     are given after those on the NUMA nodes NUMAAware chose, which counted them as
//     fitting any set, and before devices known to sit elsewhere; without such a choice,
//     last. Unhealthy devices are never given.
//   - A malformed devices.sextant.io/allocated annotation on a pod already on a node is
//     logged and ignored (its devices count as free): scheduling must not stop on it.
//   - Reserve must run after NUMAAware's Reserve, which fixes the NUMA choice when Filter
//     and Score were not run on the node (single feasible node, batching hint).
package devices

import (
	"context"
	"fmt"
	"sync"
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
const Name = "DeviceAware"

// DeviceAware is the plugin.
type DeviceAware struct {
	nodes     nodelookup.Nodes
	nodeInfos nodelookup.NodeInfos
	// ledger holds the devices Reserve took for pods whose devices.sextant.io/allocated
	// is not visible yet; FreeDevices consults it only for pods without the annotation.
	ledger *podledger.Ledger[annotations.Allocation]
	// freeCache holds each node's free devices between cycles.
	freeCache *nodecache.Cache[*v1alpha1.NodeTopology, *Free]
	now       func() time.Time
	// waiting are the pods Filter rejected, brought back by any NodeTopology change and
	// by a silent node's agent being heard again; snapshot lists the scheduler's nodes
	// for PostFilter. Nil without a Handle.
	waiting  *requeue.Waiting
	snapshot func() ([]fwk.NodeInfo, error)
	// silentNodes are the nodes Filter rejected as silent and not heard from since.
	silentNodes silence.Nodes
	// resolver maps extended resources to DRA DeviceClasses (KEP-5004); nil without DRA.
	resolver fwk.DeviceClassResolver
}

var (
	_ fwk.PreFilterPlugin     = &DeviceAware{}
	_ fwk.PreFilterExtensions = &DeviceAware{}
	_ fwk.FilterPlugin        = &DeviceAware{}
	_ fwk.PreScorePlugin      = &DeviceAware{}
	_ fwk.ScorePlugin         = &DeviceAware{}
	_ fwk.ReservePlugin       = &DeviceAware{}
	_ fwk.PostFilterPlugin    = &DeviceAware{}
	_ fwk.EnqueueExtensions   = &DeviceAware{}
	_ fwk.SignPlugin          = &DeviceAware{}
)

// New is the plugin factory for app.WithPlugin(devices.Name, devices.New). The plugin
// takes no arguments.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	if err := pluginargs.None(Name, obj); err != nil {
		return nil, err
	}
	registerMetrics()
	if h.KubeConfig() == nil {
		return nil, fmt.Errorf("device plugin: the scheduler handle has no kubeconfig to watch NodeTopology with")
	}
	store, err := heartbeat.Shared(ctx, h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("device plugin: %w", err)
	}
	pl := NewWith(store, nodelookup.Snapshot(h))
	if m := h.SharedDRAManager(); m != nil {
		pl.resolver = m.DeviceClassResolver()
	}
	numahint.Default.Register(h, pl)
	pl.waiting = requeue.New(Name, h.Activate)
	pl.snapshot = h.SnapshotSharedLister().NodeInfos().List
	store.AddListener(pl.listener())
	if f := h.SharedInformerFactory(); f != nil {
		pods := f.Core().V1().Pods().Informer()
		if err := pl.ledger.ForgetOnPodEvents(pods, isAnnotated); err != nil {
			return nil, fmt.Errorf("device plugin: watch pods for reservations: %w", err)
		}
		if err := pl.waiting.WatchPods(pods); err != nil {
			return nil, fmt.Errorf("device plugin: watch pods: %w", err)
		}
	}
	return pl, nil
}

// listener is what the heartbeat store tells DeviceAware: a changed NodeTopology may
// admit any waiting pod, and so may a silent agent's report, since an agent back from
// an outage rewrites its NodeTopology unchanged and the store tells no one of that.
// Call it once waiting is set.
func (pl *DeviceAware) listener() heartbeat.Listener {
	return heartbeat.Listener{Topology: pl.waiting.ActivateAll, Bandwidth: pl.reportArrived}
}

// NewWith builds the plugin from its parts, without a framework Handle (tests, embedding).
func NewWith(nodes nodelookup.Nodes, nodeInfos nodelookup.NodeInfos) *DeviceAware {
	registerMetrics()
	return &DeviceAware{nodes: nodes, nodeInfos: nodeInfos,
		ledger:    podledger.New[annotations.Allocation](func(n int) { reservations.Set(float64(n)) }),
		freeCache: nodecache.New[*v1alpha1.NodeTopology, *Free](heartbeat.SlotDeviceFree),
		now:       time.Now}
}

// Name returns the plugin's name.
func (pl *DeviceAware) Name() string { return Name }

func isAnnotated(pod *v1.Pod) bool {
	_, ok := pod.Annotations[annotations.DevicesAllocated]
	return ok && pod.Spec.NodeName != ""
}

const stateKey fwk.StateKey = Name

// cycleState is the plugin's CycleState entry for one pod.
type cycleState struct {
	// topologyVersion is the store's when PreFilter ran (see PostFilter).
	topologyVersion uint64
	req             Request
	// want is req as Filter and Score read it for every node.
	want Want
	// total is req.Total(), which Filter and Score check for every node.
	total int64
	// picks are the devices Reserve picked, by node. Shared by clones: only Reserve and
	// Unreserve write it, and they run on the cycle's own state.
	picks *pickMap
	// sim is what the framework changed on the node of a copy of this state (AddPod,
	// RemovePod); nil in the cycle's own state. A cycleState with a sim belongs to one
	// CycleState alone, so AddPod and RemovePod may change it in place.
	sim *simulation
	// resolver maps extended resources to DeviceClasses; set only when one of the
	// pod's kinds maps to one, so that a node may give it through DRA (wantOn).
	resolver fwk.DeviceClassResolver
}

// wantOn is what the pod wants of the device plugin on node: want less the kinds the
// node gives through DRA (draclaims.BackedByDRA), which DynamicResources allocates and
// the ranker does not pick.
func (s *cycleState) wantOn(node *v1.Node) Want {
	if s.resolver == nil {
		return s.want
	}
	out := make(Want, 0, len(s.want))
	for _, w := range s.want {
		if !draclaims.BackedByDRA(s.resolver, node, Kinds[w.Kind].ResourceName()) {
			out = append(out, w)
		}
	}
	return out
}

// Clone shares s until a simulation starts in it: everything else is read-only or
// shared on purpose (picks). A simulation is the clone's own, since preemption clones
// the state once per node and simulates each node's victims in its copy.
func (s *cycleState) Clone() fwk.StateData {
	if s.sim == nil {
		return s
	}
	c := *s
	c.sim = s.sim.clone()
	return &c
}

type pickMap struct {
	mu sync.Mutex
	m  map[string]annotations.Allocation
}

func (p *pickMap) get(node string) (annotations.Allocation, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.m[node]
	return a, ok
}

func (p *pickMap) set(node string, a annotations.Allocation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[node] = a
}

func (p *pickMap) delete(node string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, node)
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
