package report

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"sextant.io/sextant/agent/topology"
	"sextant.io/sextant/api/v1alpha1"
)

// TopologyConfig says when a NodeTopology is written.
type TopologyConfig struct {
	// Resync is the most time between two writes even without a change (default 10m).
	Resync time.Duration
	// AgentVersion goes into the status.
	AgentVersion string
	// NUMAPinning, if set, says whether the agent pins pods to their NUMA nodes now; it
	// is published with every write, and a change is written at the next Offer. Unset:
	// the agent does not pin (Off).
	NUMAPinning func() v1alpha1.NUMAPinning
}

// holderWriteInterval is the least time between a write that changed holders bring
// forward and the write before it. Holders change as pods with sextant devices come and
// go, a handful per node, so a second delays the ranker's view of a taken device by
// little next to placing and admitting the pod that would want it, and bounds what a
// node whose holders flap costs the API server at one status update a second.
const holderWriteInterval = time.Second

// holderWriteTimeout bounds a write holders bring forward, as the agent's loops bound
// each round's writes.
const holderWriteTimeout = 30 * time.Second

// TopologyReporter writes the node's NodeTopology when the topology or a device's health
// changed, and at every resync; when the devices' holders change, soon (SetHolders).
type TopologyReporter struct {
	cfg TopologyConfig
	// OnDevices, if set, is given the node's devices with their health on every Offer
	// (the device plugin's list; it acts only on changes) and returns, by PCI address,
	// the devices kept from pods and why, published as each device's excluded.
	OnDevices func([]v1alpha1.PCIDevice) map[string]string

	clock clock.PassiveClock
	// timers schedules the writes holders bring forward; nil (a passive clock) leaves
	// the holders to the next Offer.
	timers clock.Clock
	// ctx, from Start, bounds the writes holders bring forward.
	ctx context.Context

	// writeMu serializes Offer and the writes holders bring forward: both publish the
	// last offered topology through one writer.
	writeMu      sync.Mutex
	w            *writer
	tracker      *topology.Tracker
	base         *v1alpha1.Topology // the last offered, before excluded and holders
	baseExcluded map[string]string
	last         *v1alpha1.Topology
	lastPinning  v1alpha1.NUMAPinning
	lastWrite    time.Time

	mu      sync.Mutex
	holders map[string]v1alpha1.DeviceHolder
	// published are the holders the NodeTopology read by Start named.
	published map[string]v1alpha1.DeviceHolder
	wroteAt   time.Time // lastWrite, for SetHolders, which must not wait for a write
	pending   bool      // a write for changed holders is scheduled
}

// NewTopologyReporter returns a reporter for the node's NodeTopology. A clk that is a
// clock.Clock (clock.RealClock is) also times the writes changed holders bring forward.
func NewTopologyReporter(cfg TopologyConfig, dyn dynamic.Interface, kube kubernetes.Interface, nodeName string, m *Metrics, clk clock.PassiveClock) *TopologyReporter {
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Minute
	}
	timers, _ := clk.(clock.Clock)
	return &TopologyReporter{
		cfg:    cfg,
		w:      newWriter(kindTopology, "nodetopologies", dyn, kube, nodeName, m),
		clock:  clk,
		timers: timers,
	}
}

// Start seeds device health from the NodeTopology this node published before, so a
// device that vanished while the agent was down is still reported, as Unhealthy, and
// keeps the holders it named (PublishedHolders). ctx also bounds the writes SetHolders
// brings forward: none is made before Start or after ctx ends.
//
// It waits out an API server that is down or overloaded, retrying until ctx ends: a
// first write without what was published would show the ranker held devices as free
// and drop the devices that vanished while the agent was down, for good. An error that
// will not pass by itself (forbidden) ends it at once.
func (r *TopologyReporter) Start(ctx context.Context) error {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	obj, err := r.readPublished(ctx)
	if err != nil {
		return err
	}
	// The first write starts from what was just read.
	r.w.last = obj
	var seed []v1alpha1.PCIDevice
	if obj != nil {
		var prev v1alpha1.NodeTopology
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &prev); err != nil {
			return fmt.Errorf("decode the published NodeTopology: %w", err)
		}
		seed = prev.Status.PCIDevices
	}
	r.tracker = topology.NewTracker(seed)
	published := map[string]v1alpha1.DeviceHolder{}
	for _, d := range seed {
		if d.Holder != nil {
			published[d.Address] = *d.Holder
		}
	}
	r.mu.Lock()
	r.published = published
	r.mu.Unlock()
	return nil
}

// startRetry paces Start's reads of the published NodeTopology: soon after a blip, no
// more than a read per agent every 10s (with jitter) through a long outage.
var startRetry = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: 10 * time.Second, Steps: 8}

// readPublished reads the node's NodeTopology (nil when there is none), retrying errors
// worth another try until ctx ends.
func (r *TopologyReporter) readPublished(ctx context.Context) (*unstructured.Unstructured, error) {
	backoff := startRetry
	for {
		obj, err := r.w.get(ctx)
		if err == nil || !retriable(err) {
			return obj, err
		}
		delay := backoff.Step()
		klog.FromContext(ctx).Info("waiting for the API server to read the NodeTopology published before", "err", err.Error(), "retryIn", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (waiting for the API server: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// PublishedHolders returns the holders the NodeTopology this node published before
// named (empty before Start, or when it named none): the device audit keeps those the
// kubelet no longer lists while their pods run.
func (r *TopologyReporter) PublishedHolders() map[string]v1alpha1.DeviceHolder {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.published
}

// Offer writes the topology read now if it changed since the last write or the resync
// is due, and says whether it wrote.
func (r *TopologyReporter) Offer(ctx context.Context, read v1alpha1.Topology) (bool, error) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	if r.tracker == nil {
		r.tracker = topology.NewTracker(nil)
	}
	next := read
	next.PCIDevices = r.tracker.Update(read.PCIDevices)
	next.NICs = physicalNICs(read.NICs)
	topology.Normalize(&next)
	var excluded map[string]string
	if r.OnDevices != nil {
		excluded = r.OnDevices(next.PCIDevices)
	}
	r.base, r.baseExcluded = &next, excluded
	return r.publish(ctx)
}

// publish writes the last offered topology with the holders known now if that differs
// from the last write or the resync is due, and says whether it wrote. The caller holds
// writeMu.
func (r *TopologyReporter) publish(ctx context.Context) (bool, error) {
	next := *r.base
	excluded := r.baseExcluded
	r.mu.Lock()
	holders := r.holders
	r.mu.Unlock()
	if len(excluded) > 0 || len(holders) > 0 {
		// The tracker's slice is its own: publish a copy with the pod-side state.
		next.PCIDevices = slices.Clone(next.PCIDevices)
		for i := range next.PCIDevices {
			d := &next.PCIDevices[i]
			d.Excluded = excluded[d.Address]
			if h, ok := holders[d.Address]; ok {
				d.Holder = &h
			}
		}
	}
	pinning := v1alpha1.PinningOff
	if r.cfg.NUMAPinning != nil {
		pinning = r.cfg.NUMAPinning()
	}
	now := r.clock.Now()
	if r.last != nil && now.Sub(r.lastWrite) < r.cfg.Resync && pinning == r.lastPinning && equality.Semantic.DeepEqual(*r.last, next) {
		return false, nil
	}
	updated := metav1.NewTime(now.UTC().Truncate(time.Second))
	status := v1alpha1.NodeTopologyStatus{
		UpdateTime:   &updated,
		AgentVersion: r.cfg.AgentVersion,
		Summary:      Summarize(next),
		NUMAPinning:  pinning,
		Topology:     next,
	}
	if err := r.w.write(ctx, &status); err != nil {
		return false, err
	}
	r.last, r.lastPinning, r.lastWrite = &next, pinning, now
	r.mu.Lock()
	r.wroteAt = now
	r.mu.Unlock()
	return true, nil
}

// SetHolders makes holders (by PCI address, the pods the kubelet assigned devices to)
// part of what is published. Holders that differ from the last are written soon, not at
// the next Offer: the ranker counts a held device as taken only once it is published.
// That write comes holderWriteInterval after the write before it at the earliest, and
// SetHolders never waits for it.
func (r *TopologyReporter) SetHolders(holders map[string]v1alpha1.DeviceHolder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if maps.Equal(r.holders, holders) {
		return
	}
	r.holders = holders
	if r.timers == nil || r.ctx == nil || r.pending {
		return
	}
	r.pending = true
	r.scheduleLocked(holderWriteInterval - r.clock.Since(r.wroteAt))
}

// scheduleLocked writes the holders after wait, in a goroutine of its own that ends with
// the context Start was given. The caller holds mu.
func (r *TopologyReporter) scheduleLocked(wait time.Duration) {
	ctx := r.ctx
	t := r.timers.NewTimer(max(wait, 0))
	go func() {
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
			r.writeHolders(ctx)
		}
	}()
}

// writeHolders publishes the last offered topology with the holders known now, unless a
// write came too recently, in which case it waits out the rest of holderWriteInterval.
func (r *TopologyReporter) writeHolders(ctx context.Context) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.Lock()
	// An Offer may have written since this was scheduled.
	if wait := holderWriteInterval - r.clock.Since(r.wroteAt); wait > 0 {
		r.scheduleLocked(wait)
		r.mu.Unlock()
		return
	}
	r.pending = false
	r.mu.Unlock()
	if r.base == nil {
		return // nothing offered yet: the first Offer publishes the holders
	}
	wctx, cancel := context.WithTimeout(ctx, holderWriteTimeout)
	defer cancel()
	if _, err := r.publish(wctx); err != nil && ctx.Err() == nil {
		// The next Offer, at most a topology interval away, tries again.
		klog.FromContext(ctx).Error(err, "publishing NodeTopology with the devices' new holders failed")
	}
}

// Run reads the topology every interval and offers it, until ctx ends.
func (r *TopologyReporter) Run(ctx context.Context, source *topology.Cache, every time.Duration, log logr.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		snap, err := source.Fresh()
		switch {
		case err != nil:
			log.Error(err, "reading the topology failed", "root", source.Root())
		default:
			wrote, err := r.Offer(ctx, snap.Topology)
			if err != nil && ctx.Err() == nil {
				log.Error(err, "publishing NodeTopology failed")
			}
			if wrote {
				for _, w := range snap.Warnings {
					log.Info("topology item left out", "reason", w)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// physicalNICs keeps the NICs backed by a PCI function. Virtual ones (a veth per pod,
// bridges) say nothing about locality, and publishing them would rewrite NodeTopology
// whenever a pod starts or stops.
func physicalNICs(nics []v1alpha1.NIC) []v1alpha1.NIC {
	out := make([]v1alpha1.NIC, 0, len(nics))
	for _, n := range nics {
		if n.PCIAddress != nil {
			out = append(out, n)
		}
	}
	return out
}

// Summarize counts a topology's parts for the printer columns.
func Summarize(t v1alpha1.Topology) *v1alpha1.TopologySummary {
	s := &v1alpha1.TopologySummary{NUMANodes: int32(len(t.NUMANodes)), Devices: int32(len(t.PCIDevices))}
	for _, n := range t.NUMANodes {
		s.CPUs += int32(len(n.CPUs))
	}
	for _, d := range t.PCIDevices {
		if d.Health == v1alpha1.Unhealthy {
			s.UnhealthyDevices++
		}
	}
	return s
}
