package enforce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"sextant.io/sextant/agent/bandwidth"
	"sextant.io/sextant/agent/nodepods"
	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/bandwidthclaim"
	"sextant.io/sextant/api/v1alpha1"
)

// controller names the enforcer in the Events it records.
const controller = "sextant.io/bandwidth-enforcement"

// Config configures an Enforcer.
type Config struct {
	NodeName string
	// Networks are the networks whose guarantees the agent keeps.
	Networks []string
	Shares   Shares
	// Resync is how often the shaping is checked against the pods and the kernel even
	// without a pod event (default 10s): another tool may have removed a qdisc.
	Resync time.Duration
	// SampleInterval is how often the classes' counters are read (default 1s).
	SampleInterval time.Duration
	// Window is how long a pod whose guarantee was not met stays reported (default 60s).
	Window time.Duration
	// Cgroup returns a host-network pod's pod cgroup on cgroup v2, zero if none; nil
	// where the node has no cgroup v2 (HostNetworkCgroups).
	Cgroup func(*corev1.Pod) PodCgroup
	// NotStarted are the deadlines after which a bound pod that has not started holds
	// no guarantee until it starts: the ranker's (its notStartedReleaseAfter), so both
	// admit the same pods. A deadline is applied at the next resync after it passes.
	NotStarted bandwidthclaim.Deadlines
	// Now is the clock the deadlines are judged by (default time.Now).
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Resync <= 0 {
		c.Resync = 10 * time.Second
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = time.Second
	}
	if c.Window <= 0 {
		c.Window = 60 * time.Second
	}
	if c.Shares == (Shares{}) {
		c.Shares = DefaultShares
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// NetworkStatus is what the enforcer says of one network it enforces.
type NetworkStatus struct {
	Network  string
	Enforced bool
	// Reason and Message are the GuaranteesEnforced condition's.
	Reason, Message string
	// Since is when Enforced and Reason last changed.
	Since time.Time
	// Capacity and Guaranteed are per direction, in bits/s.
	Capacity, Guaranteed [2]int64
	// Shortfalls counts the pods per direction the node cannot guarantee.
	Shortfalls [2]int
}

// Enforcer keeps, on the node, the bandwidth the ranker placed each pod for: it shapes
// the interfaces of every enforced network so that each pod gets its required rate and
// no more than its limit, following the node's pods.
type Enforcer struct {
	cfg      Config
	kube     kubernetes.Interface
	pods     cache.SharedIndexInformer
	snapshot func() bandwidth.Snapshot
	shaper   *Shaper
	log      logr.Logger
	now      func() time.Time
	trigger  chan struct{}
	alive    atomic.Int64 // unix nanoseconds of the last loop turn

	mu          sync.Mutex
	status      []NetworkStatus
	plan        Plan
	names       map[types.UID]string
	acct        *accounting
	reconciles  [2]uint64 // ok, error
	shapedCount int
	// retry: the last pass left something to try again at the next sample tick.
	retry bool
	// warned remembers the Events recorded, so each is recorded once per agent run (and
	// once ever, by its name: see nodepods.EventName).
	warned map[string]bool
}

// New returns an enforcer for the networks in cfg, reading the meter's snapshots for
// their interfaces and capacities. It registers its metrics in reg.
func New(cfg Config, kube kubernetes.Interface, pods cache.SharedIndexInformer, snapshot func() bandwidth.Snapshot, shaper *Shaper, reg prometheus.Registerer, log logr.Logger) (*Enforcer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Shares.Validate(); err != nil {
		return nil, err
	}
	e := &Enforcer{
		cfg: cfg, kube: kube, pods: pods, snapshot: snapshot, shaper: shaper, log: log,
		now: time.Now, trigger: make(chan struct{}, 1), names: map[types.UID]string{},
		acct: newAccounting(cfg.Window), warned: map[string]bool{},
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { e.poke() },
		UpdateFunc: func(_, _ any) { e.poke() },
		DeleteFunc: func(any) { e.poke() },
	}); err != nil {
		return nil, fmt.Errorf("watch the node's pods: %w", err)
	}
	if reg != nil {
		if err := reg.Register(collector{e}); err != nil {
			return nil, err
		}
	}
	e.alive.Store(e.now().UnixNano())
	return e, nil
}

func (e *Enforcer) poke() {
	select {
	case e.trigger <- struct{}{}:
	default:
	}
}

// LastAlive is when the enforcer's loop last turned.
func (e *Enforcer) LastAlive() time.Time { return time.Unix(0, e.alive.Load()) }

// LivenessInterval is how often LastAlive moves while all is well.
func (e *Enforcer) LivenessInterval() time.Duration { return max(e.cfg.SampleInterval, e.cfg.Resync) }

// Status returns what the enforcer says of each enforced network, in the order
// configured; nil before its first pass.
func (e *Enforcer) Status() []NetworkStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.status)
}

// Run shapes the node until ctx ends. What it made stays: the caller unshapes with
// Teardown when the agent is removed from the node.
func (e *Enforcer) Run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), e.pods.HasSynced) {
		return ctx.Err()
	}
	resync := time.NewTicker(e.cfg.Resync)
	defer resync.Stop()
	sample := time.NewTicker(e.cfg.SampleInterval)
	defer sample.Stop()
	e.reconcile(ctx)
	for {
		e.alive.Store(e.now().UnixNano())
		select {
		case <-ctx.Done():
			return nil
		case <-e.trigger:
			e.reconcile(ctx)
		case <-resync.C:
			e.reconcile(ctx)
		case <-sample.C:
			if e.retrying() {
				e.reconcile(ctx)
			}
			e.sample(ctx)
		}
	}
}

// Teardown gives every interface the agent shaped back what it had before.
func (e *Enforcer) Teardown() error { return Teardown(e.shaper) }

// Teardown gives every interface the shaper's state names back what it had before.
func Teardown(s *Shaper) error {
	var errs []error
	for _, name := range s.Shaped() {
		if err := s.Unshape(name); err != nil {
			errs = append(errs, fmt.Errorf("unshape %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// networks returns the enforced networks as the meter sees them now.
func (e *Enforcer) networks(snap bandwidth.Snapshot) []Network {
	ifaces := map[string]bandwidth.InterfaceSample{}
	for _, i := range snap.Interfaces {
		ifaces[i.Name] = i
	}
	var out []Network
	for _, name := range e.cfg.Networks {
		n := Network{Name: name}
		for _, ns := range snap.Networks {
			if ns.Name != name {
				continue
			}
			for _, ifname := range ns.Interfaces {
				s, ok := ifaces[ifname]
				if !ok {
					continue
				}
				n.Interfaces = append(n.Interfaces, Interface{Name: ifname, Capacity: [2]float64{value(s.Ingress.Capacity), value(s.Egress.Capacity)}})
			}
		}
		out = append(out, n)
	}
	return out
}

func value(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// reconcile makes the shaping match the node's pods and interfaces.
func (e *Enforcer) reconcile(ctx context.Context) {
	snap := e.snapshot()
	if snap.Time.IsZero() {
		return // the meter has not sampled yet: no interface is known
	}
	nets := e.networks(snap)
	var pods []Pod
	names := map[types.UID]string{}
	byUID := map[types.UID]*corev1.Pod{}
	now := e.cfg.Now()
	for _, obj := range e.pods.GetStore().List() {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			continue
		}
		p, perr, ok := podOf(pod, e.cfg.Cgroup, e.cfg.NotStarted, now)
		if !ok {
			continue
		}
		if perr != nil && annotations.HasBandwidth(pod.Annotations) {
			e.warnOnce(ctx, pod, "bandwidth-invalid", "BandwidthAnnotationsInvalid",
				fmt.Sprintf("the node neither guarantees nor limits this pod's bandwidth: %v", perr))
		}
		pods = append(pods, p)
		names[p.UID] = p.Name
		byUID[p.UID] = pod
	}
	state := e.shaper.State()
	plan := MakePlan(nets, pods, e.cfg.Shares, state)

	var errs []error
	// Classify before shaping: a restarted agent's first Shape replaces the filters of
	// the run before, whose maps held every pod, with its own; they must be full by then.
	classifyErr := e.shaper.Classify(pods, plan.Classified)
	errs = append(errs, classifyErr)
	desired := map[string]bool{}
	var statuses []NetworkStatus
	prev := e.Status()
	// retry: a network is not enforced, which may pass by itself (an interface not
	// sampled yet, a qdisc being replaced): the next sample tick tries again rather than
	// the next resync.
	retry := false
	for _, np := range plan.Networks {
		st := NetworkStatus{Network: np.Name, Capacity: np.Capacity, Guaranteed: np.Guaranteed}
		for _, s := range np.Shortfalls {
			st.Shortfalls[s.Direction]++
		}
		var failed []string
		for _, ifc := range np.Interfaces {
			err := e.shaper.Shape(ifc)
			if errors.Is(err, ErrInterfaceGone) {
				// Deleted since the meter's last rescan, which drops it from the network;
				// what is left of its shaping goes below.
				continue
			}
			desired[ifc.Name] = true
			if err != nil {
				failed = append(failed, err.Error())
				errs = append(errs, err)
			}
		}
		if classifyErr != nil {
			failed = append(failed, classifyErr.Error())
		}
		switch {
		case np.Problem != "":
			st.Reason, st.Message = np.ProblemReason, np.Problem
		case len(failed) > 0:
			st.Reason, st.Message = v1alpha1.ReasonShapingFailed, strings.Join(failed, "; ")
		default:
			st.Enforced, st.Reason = true, v1alpha1.ReasonShaped
			st.Message = e.describe(np)
		}
		st.Since = e.now()
		for _, p := range prev {
			if p.Network == st.Network && p.Enforced == st.Enforced && p.Reason == st.Reason {
				st.Since = p.Since
			}
		}
		// A network without interfaces is one whose NICs are down, or not sampled yet
		// just after a start: no event for that.
		if !st.Enforced && st.Reason != v1alpha1.ReasonNoInterfaces && !wasFailing(prev, st) {
			e.nodeEvent(ctx, "BandwidthEnforcementFailed", fmt.Sprintf("network %s: guarantees not enforced: %s", st.Network, st.Message))
		}
		if !st.Enforced {
			retry = true
		}
		statuses = append(statuses, st)
		for _, s := range np.Shortfalls {
			if pod := byUID[s.Pod]; pod != nil {
				e.warnOnce(ctx, pod, "bandwidth-not-guaranteed-"+s.Direction.String(), "BandwidthNotGuaranteed", fmt.Sprintf(
					"the node keeps guarantees on network %s up to %s %s, and the pods bound before this one hold %s: its %s-required %s is not guaranteed",
					np.Name, annotations.FormatRate(np.Capacity[s.Direction]), s.Direction, annotations.FormatRate(np.Guaranteed[s.Direction]),
					s.Direction, annotations.FormatRate(s.Required)))
			}
		}
	}
	// Interfaces no enforced network has any more, or gone; one that is only down keeps
	// its shaping for when it is up again.
	for _, name := range e.shaper.Shaped() {
		if desired[name] || e.down(name) {
			continue
		}
		if err := e.shaper.Unshape(name); err != nil {
			errs = append(errs, err)
		}
	}
	state.ReleaseMinors(plan.Classified)
	errs = append(errs, state.SaveIfChanged())
	for key := range e.warned {
		if uid, _, _ := strings.Cut(key, "/"); byUID[types.UID(uid)] == nil {
			delete(e.warned, key)
		}
	}

	err := errors.Join(errs...)
	e.mu.Lock()
	e.status, e.plan, e.names, e.shapedCount = statuses, plan, names, len(e.shaper.Shaped())
	e.retry = retry || err != nil
	if err != nil {
		e.reconciles[1]++
	} else {
		e.reconciles[0]++
	}
	e.mu.Unlock()
	if err != nil {
		e.log.Error(err, "could not make the node's shaping match its pods; trying again")
	}
}

func wasFailing(prev []NetworkStatus, st NetworkStatus) bool {
	for _, p := range prev {
		if p.Network == st.Network {
			return !p.Enforced && p.Reason == st.Reason
		}
	}
	return false
}

// describe is the message of an enforced network's condition.
func (e *Enforcer) describe(np NetworkPlan) string {
	names := make([]string, len(np.Interfaces))
	for i, ifc := range np.Interfaces {
		names[i] = ifc.Name
	}
	return fmt.Sprintf("%s shaped; %d pods guaranteed, %s of %s ingress and %s of %s egress", strings.Join(names, ", "),
		len(np.Guarantees), annotations.FormatRate(np.Guaranteed[Ingress]), annotations.FormatRate(np.Capacity[Ingress]),
		annotations.FormatRate(np.Guaranteed[Egress]), annotations.FormatRate(np.Capacity[Egress]))
}

// down reports whether the interface exists and is down.
func (e *Enforcer) down(name string) bool {
	l, err := e.shaper.h.LinkByName(name)
	return err == nil && (l.Attrs().Flags&net.FlagUp == 0 || l.Attrs().OperState == netlink.OperDown)
}

// sample reads every class's counters and accounts for them.
func (e *Enforcer) sample(ctx context.Context) {
	e.mu.Lock()
	plan, names := e.plan, e.names
	e.mu.Unlock()
	counters := map[classKey]classCounters{}
	rates := map[classKey]uint64{}
	pods := map[classKey]podClass{}
	for _, np := range plan.Networks {
		for _, ifc := range np.Interfaces {
			stats, err := e.shaper.Stats(ifc.Name)
			if err != nil {
				continue // the next reconcile says why
			}
			for _, d := range Directions {
				owners := map[uint16]Class{DefaultMinor: ifc.Qdisc[d].Default}
				for _, c := range ifc.Qdisc[d].Pods {
					owners[c.Minor] = c
					pods[classKey{network: np.Name, direction: d, pod: c.Pod}] = podClass{
						name: names[c.Pod], guarantee: uint64(np.Guarantees[c.Pod][d]), ceil: c.Ceil}
				}
				for minor, cs := range stats[d] {
					c, ok := owners[minor]
					if !ok {
						continue
					}
					k := classKey{network: np.Name, iface: ifc.Name, direction: d, pod: c.Pod}
					counters[k] = classCounters{bytes: cs.Bytes, drops: uint64(cs.Drops), overlimits: uint64(cs.Overlimit), backlog: uint64(cs.Backlog)}
					rates[k] = cs.Rate
				}
			}
		}
	}
	e.mu.Lock()
	newly := e.acct.observe(e.now(), counters, rates, pods)
	e.mu.Unlock()
	for _, k := range newly {
		pod, ok := nodepods.ByUID(e.pods, string(k.pod))
		if !ok {
			continue
		}
		e.warnOnce(ctx, pod, "bandwidth-unmet-"+k.direction.String(), "BandwidthGuaranteeNotMet", fmt.Sprintf(
			"the pod had %s packets waiting while it got less than its %s-required rate on network %s: the interface carries less than its capacity says, or the node is short of CPU",
			k.direction, k.direction, k.network))
		e.log.Info("a pod's guarantee was not met", "pod", pod.Namespace+"/"+pod.Name, "network", k.network, "direction", k.direction.String())
	}
}

// retrying reports whether the last pass (or none yet: the meter had not sampled) left
// something to try again.
func (e *Enforcer) retrying() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status == nil || e.retry
}

// podName returns the namespace and name of a pod with a class; empty for none.
func (e *Enforcer) podName(uid types.UID) (string, string) {
	if uid == "" {
		return "", ""
	}
	ns, name, _ := strings.Cut(e.names[uid], "/")
	return ns, name
}

// warnOnce records a Warning Event on the pod, once.
func (e *Enforcer) warnOnce(ctx context.Context, pod *corev1.Pod, suffix, reason, msg string) {
	key := string(pod.UID) + "/" + suffix
	if e.warned[key] {
		return
	}
	e.warned[key] = true
	ev := nodepods.NewPodEvent(nodepods.Source{Node: e.cfg.NodeName, Controller: controller}, pod,
		nodepods.PodEvent{Type: corev1.EventTypeWarning, Reason: reason, Suffix: suffix, Message: msg}, e.now())
	if err := nodepods.CreateEvent(ctx, e.kube, e.cfg.NodeName, ev, e.log); err != nil {
		e.log.Error(err, "could not record an event", "pod", pod.Namespace+"/"+pod.Name, "reason", reason)
	}
}

// nodeEvent records a Warning Event on the node.
func (e *Enforcer) nodeEvent(ctx context.Context, reason, msg string) {
	e.log.Info(msg, "reason", reason)
	ev := nodepods.NodeEvent(e.cfg.NodeName, controller, corev1.EventTypeWarning, reason, msg, e.now())
	if err := nodepods.CreateEvent(ctx, e.kube, e.cfg.NodeName, ev, e.log); err != nil {
		e.log.Error(err, "could not record an event on the node", "reason", reason)
	}
}
