// Package heartbeat gives the ranker's plugins an in-memory, watch-fed view of the
// agents' heartbeat objects (NodeBandwidth, NodeTopology), decoded once into their Go
// types so that Filter and Score never decode or call the API server.
//
// # Poison
//
// Every heartbeat object the API server accepts is taken without error, whatever any
// agent's credentials wrote: one that does not decode or that the ranker cannot use
// (DecodeBandwidth, DecodeTopology) is held as a Rejected, its node counts as having no
// report of that kind, it is logged and counted once per object version
// (sextant_ranker_heartbeat_rejected_total{kind,reason}), and the watches go on. Before
// this an informer transform's error failed the informer's whole list: the store never
// synced, and a restarted ranker crash-looped for as long as one bad object existed.
//
// # Arrival
//
// A NodeBandwidth's Received is when it reached the ranker (the informer's event), on
// the ranker's clock: staleness is judged by it, never by the agent's sampleTime. A
// version the store already holds (a relist) keeps its first arrival. What the ranker
// lists when it starts arrived at some unknown time before; for those the API server's
// time of the status write (managed fields) counts, when earlier than the listing, so a
// report a dead agent left behind is not fresh just because the ranker restarted.
//
// A new version delivered late, by the relist after a watch break, is dated as if it
// had come as promptly as the node's previous one: when its delay from status write to
// arrival exceeds the previous version's by more than lateAllowance, Received is its
// write time plus the previous delay. Both delays carry the same offset between the API
// server's and the ranker's clocks, so only the extra delay counts and a skewed clock
// alone never makes a report stale; a node without a previous report (its first, or
// after a deletion) keeps the arrival (see dateReport). Arrived keeps the real first
// arrival beside it, for whoever asks whether a report came in after some moment.
package heartbeat

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"sextant.io/sextant/api/v1alpha1"
)

// Store holds the latest NodeBandwidth and NodeTopology of every node, as one Node
// record per node.
type Store struct {
	bandwidth cache.SharedIndexInformer
	topology  cache.SharedIndexInformer
	nodes     *index
	// synced reports, per kind, whether the records hold what its informer listed at
	// start.
	synced map[string]cache.InformerSynced
	// topologyVersion counts the NodeTopology objects added, replaced and removed.
	topologyVersion atomic.Uint64
	// now is the ranker's clock, which stamps a report's arrival.
	now func() time.Time

	// rejected holds, per kind and object name, the version last rejected, so each
	// rejected version is logged and counted once however often it is delivered.
	rejectedMu sync.Mutex
	rejected   map[rejectKey]string

	// listeners are told of each change once the record holds it (copy on write).
	listeners atomic.Pointer[[]Listener]

	// watchErrors is the last list or watch error per kind, for WaitForSync to name.
	watchErrors sync.Map
}

// lateAllowance is how much longer than the node's previous report a report may take
// from its status write to the ranker before it counts as delivered late (dateReport):
// above the jitter of watch latency and of the write time's whole seconds, below any
// staleAfter worth setting.
const lateAllowance = 5 * time.Second

// A Listener is told of each change the Store makes to a node's record, after the record
// holds it, on the watch's goroutine (keep it short). This is how the plugins learn of
// new heartbeats: kube-scheduler does not watch them itself, so that each kind is
// watched once and a pod brought back for a report is always checked against it.
type Listener struct {
	// Bandwidth gets the node's new report, or nil when the node no longer has a usable
	// one (deleted, rejected).
	Bandwidth func(node string, report *Bandwidth)
	// Topology is called when the node's NodeTopology was added, replaced or removed.
	Topology func(node string)
}

// AddListener registers l; it hears of changes from then on.
func (s *Store) AddListener(l Listener) {
	for {
		cur := s.listeners.Load()
		var next []Listener
		if cur != nil {
			next = append(next, *cur...)
		}
		next = append(next, l)
		if s.listeners.CompareAndSwap(cur, &next) {
			return
		}
	}
}

func (s *Store) tellBandwidth(node string, b *Bandwidth) {
	if ls := s.listeners.Load(); ls != nil {
		for _, l := range *ls {
			if l.Bandwidth != nil {
				l.Bandwidth(node, b)
			}
		}
	}
}

func (s *Store) tellTopology(node string) {
	if ls := s.listeners.Load(); ls != nil {
		for _, l := range *ls {
			if l.Topology != nil {
				l.Topology(node)
			}
		}
	}
}

type rejectKey struct{ kind, name string }

// New returns a Store fed by watches through client, listing through list. Call Start,
// then WaitForSync.
func New(client dynamic.Interface, list RawLister, resync time.Duration) *Store {
	registerMetrics()
	// Decode once, when the object arrives, not on every lookup: the transforms run on
	// each watched object, and listWatch runs them on each listed one as it decodes it.
	informer := func(resource, kind string, transform cache.TransformFunc) cache.SharedIndexInformer {
		gvr := v1alpha1.GroupVersion.WithResource(resource)
		// As the dynamic informers do: a client that cannot stream a list (the fake
		// ones of unit tests) is listed the old way.
		lw := cache.ToListWatcherWithWatchListSemantics(listWatch(client, list, gvr, kind, transform), client)
		inf := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, resync, cache.Indexers{})
		_ = inf.SetTransform(transform)
		return inf
	}
	s := &Store{
		bandwidth: informer("nodebandwidths", kindBandwidth, storeBandwidth),
		topology:  informer("nodetopologies", kindTopology, storeTopology),
		nodes:     newIndex(),
		now:       time.Now,
		rejected:  map[rejectKey]string{},
	}
	s.synced = map[string]cache.InformerSynced{}
	for kind, inf := range map[string]cache.SharedIndexInformer{kindBandwidth: s.bandwidth, kindTopology: s.topology} {
		// The handlers are registered before the informers start, which cannot fail.
		reg, _ := inf.AddEventHandler(s.recordHandler())
		s.synced[kind] = func() bool { return inf.HasSynced() && reg != nil && reg.HasSynced() }
		_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
			s.watchErrors.Store(kind, err.Error())
			cache.DefaultWatchErrorHandler(ctx, r, err)
		})
	}
	return s
}

// recordHandler keeps the Node records in step with both informers.
func (s *Store) recordHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { s.put(obj, s.now(), initial) },
		UpdateFunc: func(_, obj any) { s.put(obj, s.now(), false) },
		DeleteFunc: s.remove,
	}
}

// put makes obj its node's current object of its kind, arrived at received; initial
// says it comes from the list the informer started with.
func (s *Store) put(obj any, received time.Time, initial bool) {
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		s.forgetRejection(kindBandwidth, o.Name)
		b := ParseBandwidth(o)
		b.Arrived, b.written = received, statusWritten(o)
		s.nodes.update(o.Name, func(n *Node) {
			cur := n.bandwidth.Load()
			b.Received = dateReport(cur, b.written, received, initial)
			// A relist delivers versions the store holds again: they arrived before.
			if cur != nil && cur.Object != nil && o.ResourceVersion != "" && cur.Object.ResourceVersion == o.ResourceVersion {
				b.Received = minTime(b.Received, cur.Received)
				b.Arrived = minTime(b.Arrived, cur.Arrived)
			} else if b.Received.Before(received) && !initial {
				klog.V(2).InfoS("NodeBandwidth reached the ranker late (watch break); dating it by its status write",
					"node", o.Name, "resourceVersion", o.ResourceVersion, "written", b.written, "received", b.Received)
			}
			setBandwidth(n, b)
		})
		s.tellBandwidth(o.Name, b)
	case *v1alpha1.NodeTopology:
		s.forgetRejection(kindTopology, o.Name)
		changed := true
		s.nodes.update(o.Name, func(n *Node) {
			changed = !sameTopology(n.topology.Load(), o)
			n.topology.Store(o)
		})
		// Agents rewrite an unchanged NodeTopology (--topology-resync, 10 minutes by
		// default), at 5000 nodes about 8 times a second. Told of each, NUMAAware would
		// recompute its floor over every node on the scheduling path, and NUMAAware and
		// DeviceAware would send every pod waiting for a topology change back to the
		// queue, to fail again.
		if changed {
			s.topologyVersion.Add(1)
			s.tellTopology(o.Name)
		}
	case *Rejected:
		s.noteRejection(o)
		s.dropRecord(o.Kind, o.Name)
	}
}

// dateReport is when a report counts as received (Bandwidth.Received): one written at
// written (the API server's clock; zero when unknown) that reached the ranker at
// received (the ranker's clock), prev being the node's current report (nil: none);
// initial says it comes from the list the informer started with.
//
// A watch event says nothing of whether it is prompt or replays a relist, and the two
// clocks may differ by any amount, so the write time alone cannot date a report: a
// skewed clock would age every report. The node's previous report measures the offset
// plus the usual latency (its delay); a report whose own delay exceeds that by more
// than lateAllowance waited somewhere (a watch break) and is dated by its write plus
// the previous delay. A previous report delivered late itself sets a long delay, so a
// second late delivery in a row is under-corrected; a steady delay, whatever its cause,
// is taken as normal from the next report on, so a clock step ages one report at most.
func dateReport(prev *Bandwidth, written, received time.Time, initial bool) time.Time {
	switch {
	case written.IsZero():
		return received
	case initial:
		// Listed at start: it arrived at some unknown time before.
		return minTime(written, received)
	case prev == nil || prev.written.IsZero() || prev.Arrived.IsZero():
		// Nothing to measure the delay against: a write that looks old may be skew.
		return received
	}
	prevDelay := prev.Arrived.Sub(prev.written)
	if received.Sub(written)-prevDelay <= lateAllowance {
		return received
	}
	return written.Add(prevDelay)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// dropRecord makes the node have no object of kind (deleted, or rejected).
func (s *Store) dropRecord(kind, node string) {
	switch kind {
	case kindBandwidth:
		s.nodes.update(node, func(n *Node) { setBandwidth(n, nil) })
		s.tellBandwidth(node, nil)
	case kindTopology:
		s.nodes.update(node, func(n *Node) { n.topology.Store(nil) })
		s.topologyVersion.Add(1)
		s.tellTopology(node)
	}
}

func (s *Store) remove(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		s.dropRecord(kindBandwidth, o.Name)
	case *v1alpha1.NodeTopology:
		s.dropRecord(kindTopology, o.Name)
	case *Rejected:
		s.forgetRejection(o.Kind, o.Name)
		s.dropRecord(o.Kind, o.Name)
	}
}

// noteRejection logs and counts a rejected object version the first time it is
// delivered: a relist delivers it again, and an agent that keeps writing bad reports
// is logged once per write, not once per event.
func (s *Store) noteRejection(r *Rejected) {
	key := rejectKey{r.Kind, r.Name}
	s.rejectedMu.Lock()
	seen, ok := s.rejected[key]
	s.rejected[key] = r.ResourceVersion
	s.rejectedMu.Unlock()
	if ok && seen == r.ResourceVersion {
		return
	}
	reason := r.Reason()
	rejectedTotal.WithLabelValues(r.Kind, reason).Inc()
	klog.ErrorS(r.Err, "Ignoring a heartbeat object the ranker cannot use; its node counts as having no report of this kind until a usable one arrives",
		"kind", r.Kind, "node", r.Name, "resourceVersion", r.ResourceVersion, "reason", reason)
}

func (s *Store) forgetRejection(kind, name string) {
	s.rejectedMu.Lock()
	defer s.rejectedMu.Unlock()
	if len(s.rejected) > 0 {
		delete(s.rejected, rejectKey{kind, name})
	}
}

// TopologyVersion changes whenever a node's NodeTopology is added, removed, or replaced
// by one that differs in what the store holds of it (sameTopology), after the node's
// record shows the change: a reader that sees the same version before and after reading
// records has read what every record's current topology holds.
func (s *Store) TopologyVersion() uint64 { return s.topologyVersion.Load() }

// The Store's transforms turn an informer's Unstructured into the typed object, or a
// Rejected, and never fail: a transform's error fails the informer's whole list or
// watch, which then retries forever without syncing.
//
// Managed fields are dropped: nothing in the ranker reads their field sets, and at 5000
// nodes they were 13.5 MB of a 112 MB heap
// (docs/design/0006-one-heartbeat-record-per-node.md). Of a NodeBandwidth's, one entry
// without fields is kept: the time of the latest status write, which dates the reports
// listed at startup (see "Arrival").

func storeBandwidth(in any) (any, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return in, nil // tombstones and already-decoded objects pass through
	}
	// The informer hands the transform its own copy, decoded from the watch.
	written := lastStatusWrite(u)
	u.SetManagedFields(nil)
	full, err := DecodeBandwidth(u)
	if err != nil {
		return newRejected(kindBandwidth, u, err), nil
	}
	out := trimBandwidth(full)
	if !written.IsZero() {
		out.ManagedFields = []metav1.ManagedFieldsEntry{{Subresource: "status", Time: &metav1.Time{Time: written}}}
	}
	return out, nil
}

// trimBandwidth is the part of a checked NodeBandwidth that the ranker reads: its
// identity, sampleTime, window and each network's remaining (ParseBandwidth) with the
// capacity that bounds it (so the held object still passes ValidateBandwidth), whether
// its guarantees are enforced and their capacity, the total's only for a report without
// networks. The rest (per-interface figures, rates,
// peaks) would be held for every node and never read, and would make the heap grow
// with each interface an agent reports.
func trimBandwidth(nbw *v1alpha1.NodeBandwidth) *v1alpha1.NodeBandwidth {
	out := &v1alpha1.NodeBandwidth{
		TypeMeta: nbw.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: nbw.Name, Namespace: nbw.Namespace, UID: nbw.UID, ResourceVersion: nbw.ResourceVersion,
		},
	}
	st := &nbw.Status
	out.Status.SampleTime, out.Status.Window = st.SampleTime, st.Window
	remaining := func(b *v1alpha1.Bandwidth) v1alpha1.Bandwidth {
		return v1alpha1.Bandwidth{
			Ingress: v1alpha1.DirectionBandwidth{Capacity: b.Ingress.Capacity, Remaining: b.Ingress.Remaining},
			Egress:  v1alpha1.DirectionBandwidth{Capacity: b.Egress.Capacity, Remaining: b.Egress.Remaining},
		}
	}
	if len(st.Networks) > 0 {
		out.Status.Networks = make([]v1alpha1.NetworkBandwidth, len(st.Networks))
		for i := range st.Networks {
			nw := &st.Networks[i]
			out.Status.Networks[i] = v1alpha1.NetworkBandwidth{Name: nw.Name, Bandwidth: remaining(&nw.Bandwidth)}
			// Whether the node keeps guarantees there, and up to what.
			if c := meta.FindStatusCondition(nw.Conditions, v1alpha1.ConditionGuaranteesEnforced); c != nil {
				out.Status.Networks[i].Conditions = []metav1.Condition{{Type: c.Type, Status: c.Status}}
			}
			if g := nw.Guarantees; g != nil {
				out.Status.Networks[i].Guarantees = &v1alpha1.Guarantees{
					Ingress: v1alpha1.GuaranteedDirection{Capacity: g.Ingress.Capacity},
					Egress:  v1alpha1.GuaranteedDirection{Capacity: g.Egress.Capacity},
				}
			}
		}
	} else if st.Total != nil {
		total := remaining(st.Total)
		out.Status.Total = &total
	}
	return out
}

func storeTopology(in any) (any, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return in, nil
	}
	u.SetManagedFields(nil)
	full, err := DecodeTopology(u)
	if err != nil {
		return newRejected(kindTopology, u, err), nil
	}
	return trimTopology(full), nil
}

// sameTopology reports whether next, replacing prev (nil: none), is the same object
// holding the same topology: as the store holds them (trimTopology), a rewrite by the
// agent that changed nothing the plugins read.
func sameTopology(prev, next *v1alpha1.NodeTopology) bool {
	return prev != nil && prev.UID == next.UID && equality.Semantic.DeepEqual(prev.Status, next.Status)
}

// trimTopology is the part of a checked NodeTopology that NUMAAware and DeviceAware
// read: identity, whether the agent pins, NUMA nodes, and per PCI device what decides
// whether it can be handed out (address, kind, NUMA node, health, holder, exclusion).
// Kinds, health values and NUMA node numbers are shared between all nodes instead of
// one copy per device: the garbage collector marks each held object in every cycle,
// and a device's descriptive strings (class, vendor, driver, PCIe root) and the NICs
// were never read (docs/design/0062-lean-topology-records.md).
func trimTopology(nt *v1alpha1.NodeTopology) *v1alpha1.NodeTopology {
	out := &v1alpha1.NodeTopology{
		TypeMeta: nt.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: nt.Name, Namespace: nt.Namespace, UID: nt.UID, ResourceVersion: nt.ResourceVersion, Generation: nt.Generation,
		},
	}
	out.Status.NUMAPinning = internPinning(nt.Status.NUMAPinning)
	in := &nt.Status.Topology
	out.Status.NUMANodes = in.NUMANodes
	if len(in.PCIDevices) > 0 {
		out.Status.PCIDevices = make([]v1alpha1.PCIDevice, len(in.PCIDevices))
		for i := range in.PCIDevices {
			d := &in.PCIDevices[i]
			out.Status.PCIDevices[i] = v1alpha1.PCIDevice{
				Address:  d.Address,
				Kind:     internKind(d.Kind),
				NUMANode: sharedNUMAID(d.NUMANode),
				Health:   internHealth(d.Health),
				Holder:   d.Holder,
				Excluded: d.Excluded,
			}
		}
	}
	return out
}

// numaIDs are the NUMA node numbers a device can name (ValidateTopology's bound), one
// shared pointer each: the plugins only read through them.
var numaIDs = func() (ids [MaxNUMANodes]int32) {
	for i := range ids {
		ids[i] = int32(i)
	}
	return ids
}()

func sharedNUMAID(id *int32) *int32 {
	if id == nil || *id < 0 || *id >= MaxNUMANodes {
		return id
	}
	return &numaIDs[*id]
}

func internKind(k v1alpha1.DeviceKind) v1alpha1.DeviceKind {
	for _, known := range [...]v1alpha1.DeviceKind{v1alpha1.KindGPU, v1alpha1.KindNIC, v1alpha1.KindNVMe, v1alpha1.KindAccelerator, v1alpha1.KindOther} {
		if k == known {
			return known
		}
	}
	return k
}

func internPinning(p v1alpha1.NUMAPinning) v1alpha1.NUMAPinning {
	switch p {
	case v1alpha1.PinningActive:
		return v1alpha1.PinningActive
	case v1alpha1.PinningPending:
		return v1alpha1.PinningPending
	case v1alpha1.PinningUnknown:
		return v1alpha1.PinningUnknown
	case v1alpha1.PinningOff:
		return v1alpha1.PinningOff
	case v1alpha1.PinningKubeletStaticCPUManager:
		return v1alpha1.PinningKubeletStaticCPUManager
	case v1alpha1.PinningKubeletStaticMemoryManager:
		return v1alpha1.PinningKubeletStaticMemoryManager
	}
	return p
}

func internHealth(h v1alpha1.DeviceHealth) v1alpha1.DeviceHealth {
	switch h {
	case v1alpha1.Healthy:
		return v1alpha1.Healthy
	case v1alpha1.Unhealthy:
		return v1alpha1.Unhealthy
	}
	return h
}

// statusWritten is the time of the status write storeBandwidth kept, zero if none.
func statusWritten(nbw *v1alpha1.NodeBandwidth) time.Time {
	for _, e := range nbw.ManagedFields {
		if e.Subresource == "status" && e.Time != nil {
			return e.Time.Time
		}
	}
	return time.Time{}
}

// Start starts the watches; they stop when ctx ends.
func (s *Store) Start(ctx context.Context) {
	go s.bandwidth.RunWithContext(ctx)
	go s.topology.RunWithContext(ctx)
}

// syncReportEvery is how often WaitForSync says what it still waits for: a ranker that
// cannot reach the API server, or finds no CRDs there, must not wait in silence.
const syncReportEvery = 15 * time.Second

// WaitForSync waits until both watches have listed what exists and the records hold
// it. While it waits it logs, every syncReportEvery, the kinds not listed yet and their
// last error; its own error names them too.
func (s *Store) WaitForSync(ctx context.Context) error {
	report := time.NewTicker(syncReportEvery)
	defer report.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		pending := s.pendingKinds()
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("heartbeat lists did not arrive (%s; are the sextant CRDs installed? kubectl get crd nodebandwidths.sextant.io nodetopologies.sextant.io): %w",
				strings.Join(pending, "; "), ctx.Err())
		case <-report.C:
			klog.InfoS("Waiting for the heartbeat lists from the API server", "pending", pending)
		case <-poll.C:
		}
	}
}

// pendingKinds names each kind whose list the records do not hold yet, with its last
// list or watch error.
func (s *Store) pendingKinds() []string {
	var pending []string
	for _, kind := range []string{kindBandwidth, kindTopology} {
		if synced := s.synced[kind]; synced != nil && synced() {
			continue
		}
		msg := kind + " not listed yet"
		if err, ok := s.watchErrors.Load(kind); ok {
			msg += ": " + err.(string)
		}
		pending = append(pending, msg)
	}
	return pending
}

// Node returns the node's record, nil when it has neither heartbeat object. It takes no
// lock: Filter calls it for every node of every pod.
func (s *Store) Node(name string) *Node { return s.nodes.get(name) }

// NodeOf returns the record of node, nil when it has neither heartbeat object.
func (s *Store) NodeOf(node *v1.Node) *Node { return s.nodes.get(node.Name) }

// Bandwidth returns the node's NodeBandwidth, or nil if it has none. The result is
// shared: do not modify it.
func (s *Store) Bandwidth(node string) *v1alpha1.NodeBandwidth {
	if b := s.Node(node).Bandwidth(); b != nil {
		return b.Object
	}
	return nil
}

// Topology returns the node's NodeTopology as the store holds it (Node.Topology), or
// nil if it has none. The result is shared: do not modify it.
func (s *Store) Topology(node string) *v1alpha1.NodeTopology {
	return s.Node(node).Topology()
}

// Len is the number of nodes with a heartbeat object.
func (s *Store) Len() int { return s.nodes.len() }

// EachBandwidth calls f with every node's current NodeBandwidth, in no order.
func (s *Store) EachBandwidth(f func(node string, b *Bandwidth)) {
	s.nodes.each(func(n *Node) {
		if b := n.Bandwidth(); b != nil {
			f(n.name, b)
		}
	})
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*Store{}
	offline  bool
)

// Offline makes Shared return an empty Store that never watches: for a process that
// builds the plugins only to print the configuration they run with
// (sextant-ranker --write-config-to), which needs no API server.
func Offline() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	offline = true
}

// IsOffline reports whether Offline was called.
func IsOffline() bool {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	return offline
}

// SyncTimeout bounds Shared's wait for the first list of heartbeats: past it the ranker
// exits, naming what did not sync (the CRDs not installed, the API server unreachable).
// Long enough to ride out an API server restart; the chart's startup probe allows more.
const SyncTimeout = 3 * time.Minute

// Shared returns the one Store of the process for the API server of cfg, starting and
// syncing it on first use, so that every plugin of every profile reads the same cache.
func Shared(ctx context.Context, cfg *rest.Config) (*Store, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s, ok := shared[cfg.Host]; ok {
		return s, nil
	}
	if offline {
		s := NewFromObjects()
		shared[cfg.Host] = s
		return s, nil
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("heartbeat client: %w", err)
	}
	list, err := RESTRawLister(cfg)
	if err != nil {
		return nil, err
	}
	s := New(client, list, 0)
	// The store lives as long as the process: plugin contexts end with their profile.
	s.Start(context.WithoutCancel(ctx))
	syncCtx, cancel := context.WithTimeout(ctx, SyncTimeout)
	defer cancel()
	if err := s.WaitForSync(syncCtx); err != nil {
		return nil, err
	}
	shared[cfg.Host] = s
	return s, nil
}

// NewFromObjects returns a Store holding the given objects and nothing else, for tests
// of code that reads a Store. Put adds or replaces more.
func NewFromObjects(objs ...runtime.Object) *Store {
	registerMetrics()
	s := &Store{
		bandwidth: cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1alpha1.NodeBandwidth{}, 0, cache.Indexers{}),
		topology:  cache.NewSharedIndexInformer(&cache.ListWatch{}, &v1alpha1.NodeTopology{}, 0, cache.Indexers{}),
		nodes:     newIndex(),
		now:       time.Now,
		rejected:  map[rejectKey]string{},
	}
	for _, o := range objs {
		s.Put(o)
	}
	return s
}

// Put adds or replaces a heartbeat object of a Store made by NewFromObjects, as an
// informer update would, arriving now. The object is taken as decoded and validated
// (DecodeBandwidth, DecodeTopology); a *Rejected stands for one that was not.
func (s *Store) Put(obj runtime.Object) { s.PutAt(obj, s.now()) }

// PutAt is Put of an object that arrived at received (on the ranker's clock), for
// tests of staleness.
func (s *Store) PutAt(obj runtime.Object, received time.Time) {
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		_ = s.bandwidth.GetStore().Update(o)
	case *v1alpha1.NodeTopology:
		_ = s.topology.GetStore().Update(o)
	}
	s.put(obj, received, false)
}

// Delete removes a heartbeat object from a Store made by NewFromObjects, as an informer
// delete would.
func (s *Store) Delete(obj runtime.Object) {
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		_ = s.bandwidth.GetStore().Delete(o)
	case *v1alpha1.NodeTopology:
		_ = s.topology.GetStore().Delete(o)
	}
	s.remove(obj)
}

// setBandwidth makes b the node's report, keeping the count of nodes whose report is
// legacy (made from status.total by an agent older than networks) up to date.
func setBandwidth(n *Node, b *Bandwidth) {
	prev := n.bandwidth.Swap(b)
	was, is := prev != nil && prev.Legacy, b != nil && b.Legacy
	switch {
	case is && !was:
		legacyReports.Inc()
	case was && !is:
		legacyReports.Dec()
	}
}
