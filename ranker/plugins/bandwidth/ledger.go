package bandwidth

import (
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/bandwidthclaim"
	"sextant.io/sextant/api/bandwidthquota"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/nodelookup"
)

// defaultWindow is the peak window assumed when a report does not say (DESIGN: 60s),
// for a ledger that takes every report as full (minWindow 0).
const defaultWindow = 60 * time.Second

// Ledger holds the bandwidth of pods placed on a node that the node's reports cannot
// yet reflect, so that a burst of pods does not all land on the node whose last report
// predates them.
//
// The rule: a pod reserves its expected (else required) rate per direction on its node,
// at most what the node had left and at least its required rate (see amountsLocked),
// from Reserve (or from when the ranker first sees it bound) until one of
//   - a full NodeBandwidth of that node (window ≥ minWindow) arrives whose sampleTime
//     is at least one peak window (status.window) after the pod was seen running with
//     all its containers started (running, or run and exited): that report's peak,
//     and so its remaining, was measured entirely while the pod ran, so it already
//     accounts for the pod's traffic. (sampleTime and the pod's start are both the
//     node's clock.) A partial report covers nothing: Filter does not use it either;
//   - the pod is deleted or finishes (Succeeded/Failed);
//   - the scheduler calls Unreserve (binding failed or was rejected) for the node it
//     reserved on, before the pod is seen bound there (see Unreserve).
//
// A pod that is bound but does not start (an init container that never ends, an image
// that never pulls) gives its claim up in steps (bandwidthclaim): deadlines.ReduceAfter
// after it was bound it reserves only its required rate, deadlines.ReleaseAfter after
// it nothing, and its guarantee lapses, until it starts. Otherwise one pod asking
// little required and much expected would hold a node's bandwidth for as long as its
// author likes. Sweep applies the deadlines as they pass.
//
// Pods of other schedulers (see SetOurs) reserve only while every container runs, and
// at most what the node had left (beside the other reservations) when they started:
// Filter never checked what they ask for, so a pod asking for more than any node has
// would otherwise shut its node to every pod that requires bandwidth. Once running,
// the next full report covers them.
//
// Beside the reservations, the ledger keeps what a node that enforces guarantees keeps
// (agent/enforce): per node and network, the required rates of the pods bound there
// (or reserved there by this ranker) and not finished, admitted in the order they were
// bound while they add up to no more than the guarantee capacity the node reports. It
// is the agent's own rule, so Filter admits a pod only where the node will keep its
// required rate; a pod the node would not (another scheduler's, placed past it) takes
// no part, as it gets no guarantee there. Unlike a reservation, a guarantee lasts as
// long as its pod: no report covers it.
//
// The ledger is rebuilt from the cluster rather than persisted: every pod informer
// Add/Update of a bound, unfinished pod with bandwidth annotations that the ledger does
// not hold and whose node's latest report does not cover it is reserved again
// (source=observed). On a leader change the new leader's informers list all pods, which
// rebuilds the ledger; pods bound by another scheduler are counted the same way.
type Ledger struct {
	reports nodelookup.Nodes
	// minWindow is the plugin's MinWindow: reports over a shorter window are partial
	// and cover no pod.
	minWindow time.Duration

	mu     sync.RWMutex
	byPod  map[types.UID]*reservation
	byNode map[string]*nodeReservations
	// covered remembers pods released because a report covered them, so a later status
	// update of the pod does not reserve it again (e.g. if its node's report vanished).
	covered map[types.UID]struct{}
	// none stands in a node's record for "no reservations here", so that a node
	// without any is not looked up under the lock again in every cycle.
	none *nodeReservations
	// ours says whether a pod is placed by this ranker (nil: every pod is).
	ours func(*v1.Pod) bool
	// guarantees are the pods with a required rate bound to (or reserved on) a node.
	guarantees map[types.UID]*guarantee
	// byNamespace is what the guarantees add up to per namespace: what its pods
	// placed and not finished require, which its BandwidthQuotas cap.
	byNamespace map[string]bandwidthquota.Usage

	// deadlines say how long a bound pod that has not started keeps its claim.
	deadlines bandwidthclaim.Deadlines
	// now is the ledger's clock for the deadlines.
	now func() time.Time
	// nextDeadline is the earliest time a claim changes without a pod update; zero
	// when none waits. Sweep does nothing before it.
	nextDeadline time.Time
	// onStage is told of every claim a deadline reduced or released, and of the nodes
	// that gained room by it, after the ledger's lock is released.
	onStage func([]StageChange)
	// changed is told, under the lock, of each node whose totals were just replaced:
	// the plugin's floor no longer speaks for that node (floor.go).
	changed func(node string)
}

// StageChange is a pod whose claim a deadline reduced or released.
type StageChange struct {
	Pod     types.NamespacedName
	UID     types.UID
	Node    string
	Network string
	Stage   bandwidthclaim.Stage
	// Bound is when the pod was bound.
	Bound time.Time
}

// guarantee is a pod's required rates on its node's network, which a node that enforces
// keeps if they fit (see admitLocked).
type guarantee struct {
	namespace       string
	node, network   string
	ingress, egress int64
	// bound is when the pod was bound, else reserved; started is when it started (zero:
	// not yet). Admission orders by bandwidthclaim's Order of the two.
	bound, started time.Time
	// seenBound: the informer showed the pod bound to node, and a failed binding
	// attempt no longer owns the guarantee.
	seenBound bool
	// released: the pod has not started deadlines.ReleaseAfter after it was bound, and
	// holds no guarantee until it does.
	released bool
	// admittedIn and admittedEg say whether admitLocked counted the guarantee.
	admittedIn, admittedEg bool
}

// SetOurs says which pods this ranker places, and so checked before reserving: the
// others reserve only once they run. Call it before the ledger sees pods.
func (l *Ledger) SetOurs(ours func(*v1.Pod) bool) { l.ours = ours }

type reservation struct {
	pod     string // namespace/name, for logs
	node    string
	network string
	ingress int64
	egress  int64
	// runningSince is when the pod was first seen running with every container
	// started; zero until then.
	runningSince time.Time
	// bound is set once the informer showed the pod bound to node (ObservePod made or
	// moved the reservation, or saw Reserve's node confirmed): the placement is then
	// the cluster's, and a failed binding attempt no longer owns it.
	bound bool
	// req is what the pod asks, to work its amounts out again as its claim changes.
	req annotations.BandwidthRequest
	// boundAt is when the pod was bound (else reserved); stage is how much of its
	// claim the deadlines leave it while it has not started.
	boundAt time.Time
	stage   bandwidthclaim.Stage
	// foreign: another scheduler placed the pod, so Filter never checked its rates.
	foreign bool
	// credit: the pod was a preemption victim whose traffic the node's reports still
	// count; its amounts are negative, giving the node back the victim's required
	// rates until a report measured entirely after it went (runningSince) covers that.
	credit bool
}

// nodeReservations are the reservations on one node. The totals, per network, are
// written under the ledger's lock and read without it, from the node's heartbeat record
// (see reservedOn): each write replaces the whole list, a handful of networks at most.
type nodeReservations struct {
	ledger     *Ledger
	node       string // "" for the ledger's none
	totals     atomic.Pointer[[]networkReserved]
	pods       map[types.UID]*reservation
	guarantees map[types.UID]*guarantee
}

// networkReserved is what a node's reservations add up to on one network, and what the
// guarantees the node would keep there add up to.
type networkReserved struct {
	network         string
	ingress, egress int64
	// guaranteedIn and guaranteedEg are the admitted guarantees (admitLocked).
	guaranteedIn, guaranteedEg int64
}

func (r networkReserved) zero() bool {
	return r.ingress == 0 && r.egress == 0 && r.guaranteedIn == 0 && r.guaranteedEg == 0
}

// on returns the totals on network.
func (n *nodeReservations) on(network string) networkReserved {
	if t := n.totals.Load(); t != nil {
		for _, r := range *t {
			if r.network == network {
				return r
			}
		}
	}
	return networkReserved{network: network}
}

// reserved returns the reservations' totals on network.
func (n *nodeReservations) reserved(network string) (ingress, egress int64) {
	r := n.on(network)
	return r.ingress, r.egress
}

// empty reports whether the node holds neither a reservation nor a guarantee.
func (n *nodeReservations) empty() bool { return len(n.pods) == 0 && len(n.guarantees) == 0 }

// updateLocked replaces network's totals with what change makes of them (the ledger's
// lock held). Each write replaces the whole list, which readers load without the lock.
func (n *nodeReservations) updateLocked(network string, change func(*networkReserved)) {
	var next []networkReserved
	found := false
	if t := n.totals.Load(); t != nil {
		next = make([]networkReserved, 0, len(*t)+1)
		for _, r := range *t {
			if r.network == network {
				change(&r)
				found = true
			}
			if !r.zero() {
				next = append(next, r)
			}
		}
	}
	if !found {
		r := networkReserved{network: network}
		change(&r)
		if !r.zero() {
			next = append(next, r)
		}
	}
	n.totals.Store(&next)
	if n.node != "" && n.ledger.changed != nil {
		n.ledger.changed(n.node)
	}
}

// addLocked adds the rates to network's reservation totals (the ledger's lock held).
func (n *nodeReservations) addLocked(network string, ingress, egress int64) {
	n.updateLocked(network, func(r *networkReserved) { r.ingress += ingress; r.egress += egress })
}

// NewLedger returns an empty ledger that checks coverage against reports.
func NewLedger(reports nodelookup.Nodes) *Ledger {
	l := &Ledger{
		reports:     reports,
		byPod:       map[types.UID]*reservation{},
		byNode:      map[string]*nodeReservations{},
		covered:     map[types.UID]struct{}{},
		guarantees:  map[types.UID]*guarantee{},
		byNamespace: map[string]bandwidthquota.Usage{},
		deadlines:   bandwidthclaim.DefaultDeadlines,
		now:         time.Now,
	}
	l.none = &nodeReservations{ledger: l}
	return l
}

// Reserved returns the rates reserved on node's pod network, in bits/s.
func (l *Ledger) Reserved(node string) (ingress, egress int64) {
	return l.ReservedOn(node, annotations.PodNetwork)
}

// ReservedOn returns the rates reserved on node's network, in bits/s.
func (l *Ledger) ReservedOn(node, network string) (ingress, egress int64) {
	if rec := l.reports.Node(node); rec != nil {
		return l.reservedOn(rec, network)
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if n := l.byNode[node]; n != nil {
		return n.reserved(network)
	}
	return 0, 0
}

// reservedOn is Reserved for the node of record rec, without the lock once the record
// holds this ledger's entry for it: Filter asks for every node of every pod.
//
// The record holds the node's current entry, or none: every entry is put there when
// it is created and replaced by none when it is dropped, both under the lock and into
// the record Node(name) returns then, which is the one readers find. A record created
// later starts empty and is filled here, under the read lock, so no entry can be
// created in between.
func (l *Ledger) reservedOn(rec *heartbeat.Node, network string) (ingress, egress int64) {
	r := l.totalsOn(rec, network)
	return r.ingress, r.egress
}

// totalsOn is reservedOn with the guarantees beside the reservations.
func (l *Ledger) totalsOn(rec *heartbeat.Node, network string) networkReserved {
	slot := rec.Slot(heartbeat.SlotBandwidthReserved)
	if n, ok := slot.Load().(*nodeReservations); ok && n.ledger == l {
		return n.on(network)
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	n := l.byNode[rec.Name()]
	if n == nil {
		n = l.none
	}
	slot.Store(n)
	return n.on(network)
}

// GuaranteedOn returns what the guarantees a node that enforces would keep on node's
// network add up to, in bits/s.
func (l *Ledger) GuaranteedOn(node, network string) (ingress, egress int64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if n := l.byNode[node]; n != nil {
		r := n.on(network)
		return r.guaranteedIn, r.guaranteedEg
	}
	return 0, 0
}

// reportAndReserved returns the node's report and the reservations on network beside
// it, read as one: the store swaps a new report in before the ledger releases the
// pods that report covers, so reservations read after a report changed may already be
// without pods the report read before them does not show yet. Reading again until the
// report holds still pairs each report with reservations from no earlier than itself:
// at worst a pod is counted twice for a moment, never not at all.
func (l *Ledger) reportAndReserved(rec *heartbeat.Node, network string) (report *heartbeat.Bandwidth, res networkReserved) {
	report = rec.Bandwidth()
	for report != nil {
		res = l.totalsOn(rec, network)
		again := rec.Bandwidth()
		if again == report {
			break
		}
		report = again
	}
	return report, res
}

// publishLocked puts n (an entry or none) into the node's record, if it has one.
func (l *Ledger) publishLocked(node string, n *nodeReservations) {
	if rec := l.reports.Node(node); rec != nil {
		rec.Slot(heartbeat.SlotBandwidthReserved).Store(n)
	}
}

// Len returns how many pods hold a reservation.
func (l *Ledger) Len() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.byPod)
}

// Has reports whether the pod holds a reservation, and on which node.
func (l *Ledger) Has(uid types.UID) (string, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r, ok := l.byPod[uid]
	if !ok {
		return "", false
	}
	return r.node, true
}

// Reserve records that pod, asking req, was placed on node by this scheduler. A
// reservation the informer has shown bound is kept as it is: the pod already runs
// there, so this attempt's Binding will fail and its Unreserve must find the bound one
// (which it keeps) rather than a replacement it would drop, leaving the node with none.
func (l *Ledger) Reserve(pod *v1.Pod, node string, req annotations.BandwidthRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.byPod[pod.UID]; ok && r.bound {
		klog.V(2).InfoS("Keeping the bandwidth reservation of a pod seen bound; the attempt does not replace it",
			"pod", r.pod, "node", r.node, "attemptNode", node)
		return
	}
	delete(l.covered, pod.UID)
	network := networkOf(req)
	in, eg := l.amountsLocked(node, network, req)
	at := l.now()
	l.addLocked(pod.UID, &reservation{pod: klog.KObj(pod).String(), node: node, network: network, ingress: in, egress: eg,
		req: req, boundAt: at})
	l.scheduleLocked(at)
	reservationsTotal.WithLabelValues("scheduled").Inc()
	if g, ok := l.guarantees[pod.UID]; !ok || !g.seenBound {
		l.setGuaranteeLocked(pod.UID, pod.Namespace, node, req, at, time.Time{}, false)
	}
}

// Unreserve drops the reservation Reserve made for the pod on node, if it is still
// that one. Safe to call more than once. A reservation on another node, or one the
// informer has shown bound, is kept: the pod was bound after all (by a previous leader
// whose Binding the ledger saw late, or by a Binding whose response was lost), so the
// attempt's Binding failing (409 Conflict, a client-side error) does not free the
// bandwidth it uses.
func (l *Ledger) Unreserve(uid types.UID, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.byPod[uid]
	if !ok {
		return
	}
	if r.node != node || r.bound {
		klog.V(2).InfoS("Keeping the bandwidth reservation of a pod seen bound; the failed attempt does not own it",
			"pod", r.pod, "node", r.node, "attemptNode", node)
		return
	}
	l.removeLocked(uid, releaseUnreserved)
	if g, ok := l.guarantees[uid]; ok && g.node == node && !g.seenBound {
		l.dropGuaranteeLocked(uid)
	}
}

// addLocked adds r, replacing an older reservation of the same pod.
func (l *Ledger) addLocked(uid types.UID, r *reservation) {
	l.removeLocked(uid, "")
	n := l.entryLocked(r.node)
	n.pods[uid] = r
	n.addLocked(r.network, r.ingress, r.egress)
	l.byPod[uid] = r
	if r.credit {
		return
	}
	reservationsGauge.Inc()
	reservedBytes.WithLabelValues("ingress").Add(float64(r.ingress) / 8)
	reservedBytes.WithLabelValues("egress").Add(float64(r.egress) / 8)
}

// removeLocked drops the pod's reservation; reason "" means it is being replaced and is
// not counted as a release.
func (l *Ledger) removeLocked(uid types.UID, reason string) {
	r, ok := l.byPod[uid]
	if !ok {
		return
	}
	delete(l.byPod, uid)
	if n := l.byNode[r.node]; n != nil {
		delete(n.pods, uid)
		n.addLocked(r.network, -r.ingress, -r.egress)
		l.dropEntryIfEmptyLocked(r.node)
	}
	if r.credit {
		return
	}
	reservationsGauge.Dec()
	reservedBytes.WithLabelValues("ingress").Add(-float64(r.ingress) / 8)
	reservedBytes.WithLabelValues("egress").Add(-float64(r.egress) / 8)
	if reason != "" {
		releasesTotal.WithLabelValues(reason).Inc()
	}
}

// entryLocked returns the node's entry, made and published if it has none.
func (l *Ledger) entryLocked(node string) *nodeReservations {
	n := l.byNode[node]
	if n == nil {
		n = &nodeReservations{ledger: l, node: node, pods: map[types.UID]*reservation{}, guarantees: map[types.UID]*guarantee{}}
		l.byNode[node] = n
		l.publishLocked(node, n)
	}
	return n
}

// dropEntryIfEmptyLocked removes the node's entry once it holds nothing.
func (l *Ledger) dropEntryIfEmptyLocked(node string) {
	if n := l.byNode[node]; n != nil && n.empty() {
		delete(l.byNode, node)
		l.publishLocked(node, l.none)
	}
}

// setGuaranteeLocked records the pod's required rates on node, bound (or reserved) at
// bound and started at started, replacing what it held before; a request without a
// required rate holds none.
func (l *Ledger) setGuaranteeLocked(uid types.UID, namespace, node string, req annotations.BandwidthRequest, bound, started time.Time, seenBound bool) {
	g := &guarantee{namespace: namespace, node: node, network: networkOf(req), bound: bound, started: started, seenBound: seenBound}
	if stage, next := l.deadlines.StageAt(bound, started, l.now()); stage == bandwidthclaim.Released {
		g.released = true
	} else {
		l.scheduleAtLocked(next)
	}
	if req.Ingress.HasRequired {
		g.ingress = req.Ingress.Required
	}
	if req.Egress.HasRequired {
		g.egress = req.Egress.Required
	}
	if old, ok := l.guarantees[uid]; ok {
		if *old == *g {
			return
		}
		l.dropGuaranteeLocked(uid)
	}
	if g.ingress == 0 && g.egress == 0 {
		return
	}
	l.guarantees[uid] = g
	l.entryLocked(node).guarantees[uid] = g
	l.admitLocked(node, g.network)
	l.countLocked(g, 1)
}

// countLocked adds (sign 1) or takes off (-1) the guarantee's rates in its namespace's
// usage.
func (l *Ledger) countLocked(g *guarantee, sign int64) {
	u := l.byNamespace[g.namespace]
	if u == nil {
		u = bandwidthquota.Usage{}
		l.byNamespace[g.namespace] = u
	}
	u.Add(g.network, bandwidthquota.Rates{Ingress: sign * g.ingress, Egress: sign * g.egress})
	if r := u[g.network]; r == (bandwidthquota.Rates{}) {
		delete(u, g.network)
		if len(u) == 0 {
			delete(l.byNamespace, g.namespace)
		}
	}
}

// NamespaceUsage is what the namespace's pods placed and not finished require, per
// network, but for the pod except.
func (l *Ledger) NamespaceUsage(namespace string, except types.UID) bandwidthquota.Usage {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := bandwidthquota.Usage{}
	for network, r := range l.byNamespace[namespace] {
		out[network] = r
	}
	if g, ok := l.guarantees[except]; ok && except != "" && g.namespace == namespace {
		out.Add(g.network, bandwidthquota.Rates{Ingress: -g.ingress, Egress: -g.egress})
	}
	return out
}

// dropGuaranteeLocked forgets the pod's guarantee.
func (l *Ledger) dropGuaranteeLocked(uid types.UID) {
	g, ok := l.guarantees[uid]
	if !ok {
		return
	}
	delete(l.guarantees, uid)
	l.countLocked(g, -1)
	if n := l.byNode[g.node]; n != nil {
		delete(n.guarantees, uid)
		l.admitLocked(g.node, g.network)
		l.dropEntryIfEmptyLocked(g.node)
	}
}

// admitLocked works out which guarantees on the node's network the node keeps, as its
// agent does (agent/enforce.MakePlan): in the order the pods were bound, each while the
// admitted ones add up to no more than the guarantee capacity the node reports. A node
// that does not enforce on the network admits all: nothing is kept there, and Filter
// does not ask.
func (l *Ledger) admitLocked(node, network string) {
	n := l.byNode[node]
	if n == nil {
		return
	}
	capIn, capEg := int64(math.MaxInt64), int64(math.MaxInt64)
	if nw := reportNetwork(l.reports.Node(node), network); nw != nil && nw.Enforced() {
		capIn, capEg = nw.Guarantee.Ingress, nw.Guarantee.Egress
	}
	var order []*guarantee
	for _, g := range n.guarantees {
		if g.network == network && !g.released {
			order = append(order, g)
		}
	}
	slices.SortFunc(order, func(a, b *guarantee) int {
		return l.deadlines.Order(a.bound, a.started).Compare(l.deadlines.Order(b.bound, b.started))
	})
	var in, eg int64
	for _, g := range n.guarantees {
		g.admittedIn, g.admittedEg = false, false
	}
	for _, g := range order {
		if g.ingress > 0 && in+g.ingress <= capIn {
			in += g.ingress
			g.admittedIn = true
		}
		if g.egress > 0 && eg+g.egress <= capEg {
			eg += g.egress
			g.admittedEg = true
		}
	}
	n.updateLocked(network, func(r *networkReserved) { r.guaranteedIn, r.guaranteedEg = in, eg })
}

// reportNetwork returns the network of the record's report, nil without either.
func reportNetwork(rec *heartbeat.Node, network string) *heartbeat.Network {
	if b := rec.Bandwidth(); b != nil {
		return b.Network(network)
	}
	return nil
}

// coveredBy reports whether report is full and was measured entirely while a pod
// running since runningSince ran.
func (l *Ledger) coveredBy(runningSince time.Time, report *heartbeat.Bandwidth) bool {
	if runningSince.IsZero() || report == nil || !full(report, l.minWindow) {
		return false
	}
	window := defaultWindow
	if report.Window > 0 {
		window = report.Window
	}
	return !report.SampleTime.Before(runningSince.Add(window))
}

// ObservePod brings the ledger up to date with a pod from the informer: it marks a
// reserved pod running, releases it when finished or covered, applies the deadlines of
// a pod that has not started, and reserves bound pods the ledger does not know
// (rebuild after a leader change, pods of other schedulers).
func (l *Ledger) ObservePod(pod *v1.Pod) {
	if !annotations.HasBandwidth(pod.Annotations) {
		return
	}
	var changes []StageChange
	defer func() { l.tell(changes) }()
	l.mu.Lock()
	defer l.mu.Unlock()
	if bandwidthclaim.Finished(pod) {
		l.removeLocked(pod.UID, releasePodGone)
		l.dropGuaranteeLocked(pod.UID)
		delete(l.covered, pod.UID)
		return
	}
	if pod.Spec.NodeName == "" {
		// Pending, or assumed by this scheduler and not bound yet: Reserve owns it.
		return
	}
	now := l.now()
	boundAt := bandwidthclaim.Bound(pod)
	since := bandwidthclaim.Started(pod)
	l.observeGuaranteeLocked(pod, boundAt, since)
	foreign := l.ours != nil && !l.ours(pod)
	r, ok := l.byPod[pod.UID]
	if ok && r.node != pod.Spec.NodeName {
		// Bound somewhere else than reserved (another scheduler won a race): move it.
		l.removeLocked(pod.UID, "")
		ok = false
	}
	if foreign && !bandwidthclaim.Running(pod) {
		// Another scheduler's pod reserves only while it runs: see the type's doc.
		l.removeLocked(pod.UID, releaseStopped)
		return
	}
	if !ok {
		if _, done := l.covered[pod.UID]; done {
			return
		}
		req, err := annotations.ParseBandwidth(pod.Annotations)
		if err != nil || req.Empty() {
			return
		}
		if l.coveredBy(since, l.reports.Node(pod.Spec.NodeName).Bandwidth()) {
			// Long-running pod seen at startup: its node's report already reflects it.
			l.covered[pod.UID] = struct{}{}
			return
		}
		r = &reservation{pod: klog.KObj(pod).String(), node: pod.Spec.NodeName, network: networkOf(req),
			req: req, boundAt: boundAt, foreign: foreign}
		stage, _ := l.deadlines.StageAt(boundAt, since, now)
		r.stage = stage
		r.ingress, r.egress = l.stageAmountsLocked(r)
		l.addLocked(pod.UID, r)
		reservationsTotal.WithLabelValues("observed").Inc()
	}
	r.bound = true
	r.boundAt = boundAt
	if r.runningSince.IsZero() && !since.IsZero() {
		r.runningSince = since
	}
	if stage, next := l.deadlines.StageAt(boundAt, since, now); stage != r.stage {
		if c, changed := l.restageLocked(pod.UID, r, stage); changed {
			changes = append(changes, c)
		}
	} else {
		l.scheduleAtLocked(next)
	}
	if l.coveredBy(r.runningSince, l.reports.Node(r.node).Bandwidth()) {
		l.removeLocked(pod.UID, releaseCovered)
		l.covered[pod.UID] = struct{}{}
	}
}

// observeGuaranteeLocked records the guarantee of a pod seen bound, ordered by when the
// API server bound it (its PodScheduled condition), as the agent orders it.
func (l *Ledger) observeGuaranteeLocked(pod *v1.Pod, bound, started time.Time) {
	req, err := annotations.ParseBandwidth(pod.Annotations)
	if err != nil {
		l.dropGuaranteeLocked(pod.UID)
		return
	}
	if g, ok := l.guarantees[pod.UID]; ok && g.node == pod.Spec.NodeName && bound.IsZero() {
		bound = g.bound
	}
	l.setGuaranteeLocked(pod.UID, pod.Namespace, pod.Spec.NodeName, req, bound, started, true)
}

// stageAmountsLocked is what the reservation's pod reserves at its stage, beside the
// node's other reservations (its own not counted).
func (l *Ledger) stageAmountsLocked(r *reservation) (ingress, egress int64) {
	switch {
	case r.stage == bandwidthclaim.Released:
		return 0, 0
	case r.foreign:
		return l.foreignAmountsLocked(r.node, r.network, r.req)
	case r.stage == bandwidthclaim.RequiredOnly:
		return required(r.req.Ingress), required(r.req.Egress)
	}
	return l.amountsLocked(r.node, r.network, r.req)
}

// restageLocked moves the pod's reservation to stage, its amounts with it, and says so
// when that gave anything up.
func (l *Ledger) restageLocked(uid types.UID, r *reservation, stage bandwidthclaim.Stage) (StageChange, bool) {
	before := r.stage
	oldIn, oldEg := r.ingress, r.egress
	n := l.entryLocked(r.node)
	n.addLocked(r.network, -oldIn, -oldEg)
	r.stage = stage
	r.ingress, r.egress = l.stageAmountsLocked(r)
	n.addLocked(r.network, r.ingress, r.egress)
	reservedBytes.WithLabelValues("ingress").Add(float64(r.ingress-oldIn) / 8)
	reservedBytes.WithLabelValues("egress").Add(float64(r.egress-oldEg) / 8)
	if stage <= before {
		return StageChange{}, false
	}
	if stage == bandwidthclaim.Released {
		releasesTotal.WithLabelValues(releaseNotStarted).Inc()
	}
	ns, name, _ := strings.Cut(r.pod, "/")
	return StageChange{Pod: types.NamespacedName{Namespace: ns, Name: name}, UID: uid, Node: r.node,
		Network: r.network, Stage: stage, Bound: r.boundAt}, true
}

// Sweep applies the deadlines that have passed to the pods that have not started: the
// pods' statuses do not change when a deadline passes, so nothing else would.
func (l *Ledger) Sweep() {
	var changes []StageChange
	defer func() { l.tell(changes) }()
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if l.nextDeadline.IsZero() || now.Before(l.nextDeadline) {
		return
	}
	l.nextDeadline = time.Time{}
	for uid, r := range l.byPod {
		if !r.runningSince.IsZero() || r.foreign {
			continue
		}
		stage, next := l.deadlines.StageAt(r.boundAt, time.Time{}, now)
		if stage != r.stage {
			if c, changed := l.restageLocked(uid, r, stage); changed {
				changes = append(changes, c)
			}
		}
		l.scheduleAtLocked(next)
	}
	for _, g := range l.guarantees {
		if g.released || !g.started.IsZero() {
			continue
		}
		stage, next := l.deadlines.StageAt(g.bound, time.Time{}, now)
		if stage == bandwidthclaim.Released {
			g.released = true
			l.admitLocked(g.node, g.network)
			continue
		}
		l.scheduleAtLocked(next)
	}
}

// scheduleLocked makes Sweep look again when a pod bound at bound reaches its next
// deadline.
func (l *Ledger) scheduleLocked(bound time.Time) {
	_, next := l.deadlines.StageAt(bound, time.Time{}, l.now())
	l.scheduleAtLocked(next)
}

// scheduleAtLocked makes Sweep look again at next (zero: no change to wait for).
func (l *Ledger) scheduleAtLocked(next time.Time) {
	if !next.IsZero() && (l.nextDeadline.IsZero() || next.Before(l.nextDeadline)) {
		l.nextDeadline = next
	}
}

// tell hands the changes to onStage, outside the ledger's lock.
func (l *Ledger) tell(changes []StageChange) {
	if len(changes) > 0 && l.onStage != nil {
		l.onStage(changes)
	}
}

// SetDeadlines sets how long a bound pod that has not started keeps its claim; call it
// before the ledger sees pods.
func (l *Ledger) SetDeadlines(d bandwidthclaim.Deadlines) { l.deadlines = d }

// OnStage registers the function told of the claims deadlines reduce or release; call
// it before the ledger sees pods.
func (l *Ledger) OnStage(f func([]StageChange)) { l.onStage = f }

// amountsLocked is what a pod placed on node reserves per direction (the ledger's lock
// held): its expected (else required) rate, but no more than the node's network has
// left beside the other reservations, and never less than its required rate. The
// expected rate is a scoring target Filter never checked: uncapped, a pod asking 1 bit/s
// required and 1 Pbit/s expected would shut every node it lands on to the pods after
// it. Where the node reports nothing for the direction, only the required rate.
func (l *Ledger) amountsLocked(node, network string, req annotations.BandwidthRequest) (ingress, egress int64) {
	nw, resIn, resEg := l.leftLocked(node, network)
	return capped(req.Ingress, nw.IngressKnown, nw.IngressRemaining-resIn), capped(req.Egress, nw.EgressKnown, nw.EgressRemaining-resEg)
}

// foreignAmountsLocked is what another scheduler's pod reserves on node when it starts
// (the ledger's lock held): its expected (else required) rate, but no more than the
// node's network has left beside the other reservations, its required rate included,
// as Filter never checked it; nothing where the node reports nothing for a direction.
func (l *Ledger) foreignAmountsLocked(node, network string, req annotations.BandwidthRequest) (ingress, egress int64) {
	nw, resIn, resEg := l.leftLocked(node, network)
	in, eg := int64(0), int64(0)
	if nw.IngressKnown {
		in = min(target(req.Ingress), max(nw.IngressRemaining-resIn, 0))
	}
	if nw.EgressKnown {
		eg = min(target(req.Egress), max(nw.EgressRemaining-resEg, 0))
	}
	return in, eg
}

// leftLocked returns the network of node's report (zero without one) and the node's
// reservations on it.
func (l *Ledger) leftLocked(node, network string) (nw *heartbeat.Network, resIn, resEg int64) {
	if rec := l.reports.Node(node); rec != nil {
		if report := rec.Bandwidth(); report != nil {
			nw = report.Network(network)
		}
	}
	if n := l.byNode[node]; n != nil {
		resIn, resEg = n.reserved(network)
	}
	if nw == nil {
		nw = &heartbeat.Network{}
	}
	return nw, resIn, resEg
}

// capped is one direction of amountsLocked, with left what the node has left for it.
func capped(d annotations.Direction, known bool, left int64) int64 {
	if !known {
		return required(d)
	}
	return max(required(d), min(target(d), max(left, 0)))
}

// required is the direction's required rate, 0 without one.
func required(d annotations.Direction) int64 {
	if d.HasRequired {
		return d.Required
	}
	return 0
}

// target is the direction's expected (else required) rate, never above its limit (the
// annotations refuse an expected rate above the limit; this keeps the ledger to it
// whatever built the request).
func target(d annotations.Direction) int64 {
	t, _ := d.Target()
	if d.HasLimit && t > d.Limit {
		t = max(d.Limit, required(d))
	}
	return t
}

// networkOf is the network a request reserves on: the pod network when the request
// was built without one (tests, embedders).
func networkOf(req annotations.BandwidthRequest) string {
	if req.Network == "" {
		return annotations.PodNetwork
	}
	return req.Network
}

// ForgetPod releases a deleted pod's reservation.
func (l *Ledger) ForgetPod(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLocked(uid)
}

func (l *Ledger) forgetLocked(uid types.UID) {
	l.removeLocked(uid, releasePodGone)
	l.dropGuaranteeLocked(uid)
	delete(l.covered, uid)
}

// ForgetDeleted releases a deleted pod's reservation. A preemption victim whose traffic
// its node's reports still count (they covered it) leaves a credit of its required
// rates there instead, until a report measured entirely after it went: preemption made
// that room for the preemptor, which would otherwise find the node full until then and
// have kube-scheduler preempt more.
func (l *Ledger) ForgetDeleted(pod *v1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, wasCovered := l.covered[pod.UID]
	l.forgetLocked(pod.UID)
	if !wasCovered || !preempted(pod) || pod.Spec.NodeName == "" {
		return
	}
	req, err := annotations.ParseBandwidth(pod.Annotations)
	if err != nil || !req.HasRequired() {
		return
	}
	l.addLocked(pod.UID, &reservation{pod: klog.KObj(pod).String(), node: pod.Spec.NodeName, network: networkOf(req),
		ingress: -required(req.Ingress), egress: -required(req.Egress), runningSince: l.now(), bound: true, credit: true})
}

// preempted reports whether kube-scheduler's preemption evicted the pod.
func preempted(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == v1.PodReasonPreemptionByScheduler {
			return true
		}
	}
	return false
}

// Contribution is what the pod counts for on node's network, as preemption's dry run
// takes it off or puts it back: the reservation it holds there, or its required rates
// where its node's reports cover it (they count its traffic, up to that if it uses
// it) or it is not bound yet (a nominated pod); and its guarantee, where the node
// admitted it (a nominated pod: its required rates). ok is false for a pod on another
// network or with malformed annotations.
func (l *Ledger) Contribution(pod *v1.Pod, node, network string) (c networkReserved, ok bool) {
	req, err := annotations.ParseBandwidth(pod.Annotations)
	if err != nil || networkOf(req) != network {
		return networkReserved{}, false
	}
	c.network = network
	l.mu.RLock()
	defer l.mu.RUnlock()
	if r, held := l.byPod[pod.UID]; held && r.node == node && !r.credit {
		c.ingress, c.egress = r.ingress, r.egress
	} else {
		c.ingress, c.egress = required(req.Ingress), required(req.Egress)
	}
	if g, held := l.guarantees[pod.UID]; held && g.node == node {
		if g.admittedIn {
			c.guaranteedIn = g.ingress
		}
		if g.admittedEg {
			c.guaranteedEg = g.egress
		}
	} else if pod.Spec.NodeName == "" {
		c.guaranteedIn, c.guaranteedEg = required(req.Ingress), required(req.Egress)
	}
	return c, true
}

// ObserveReport releases the reservations on the report's node that it covers.
func (l *Ledger) ObserveReport(report *v1alpha1.NodeBandwidth) {
	if report == nil {
		return
	}
	l.observeParsed(report.Name, heartbeat.ParseBandwidth(report))
}

// observeParsed is ObserveReport for the node's report already parsed.
func (l *Ledger) observeParsed(node string, parsed *heartbeat.Bandwidth) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.byNode[node]
	if n == nil {
		return
	}
	// The report may say the node enforces now, or no more, or up to another capacity.
	networks := map[string]bool{}
	for _, g := range n.guarantees {
		networks[g.network] = true
	}
	for network := range networks {
		l.admitLocked(node, network)
	}
	for uid, r := range n.pods {
		if l.coveredBy(r.runningSince, parsed) {
			l.removeLocked(uid, releaseCovered)
			l.covered[uid] = struct{}{}
		}
	}
}

// podHandler feeds the ledger from the scheduler's pod informer.
func (l *Ledger) podHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*v1.Pod); ok {
				l.ObservePod(pod)
			}
		},
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*v1.Pod); ok {
				l.ObservePod(pod)
			}
		},
		DeleteFunc: func(obj any) {
			switch o := obj.(type) {
			case *v1.Pod:
				l.ForgetDeleted(o)
			case cache.DeletedFinalStateUnknown:
				if pod, ok := o.Obj.(*v1.Pod); ok {
					l.ForgetDeleted(pod)
				}
			}
		},
	}
}
