package deviceaudit

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"

	"sextant.io/sextant/agent/nodepods"
)

// ReasonMismatch is the reason of the Warning event on a pod whose devices differ from
// its annotation.
const ReasonMismatch = "DeviceAllocationMismatch"

// Holder is the pod holding a device, as the kubelet says.
type Holder struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is empty when the agent's pod cache does not have the pod (yet).
	UID types.UID `json:"uid,omitempty"`
}

// Mismatch is a started pod whose devices of one resource are not those its
// annotation lists.
type Mismatch struct {
	Pod       *corev1.Pod
	Resource  corev1.ResourceName
	Annotated []string
	Assigned  []string
}

// Compare reads a PodResources list against the node's pods (the agent's pod cache):
// the holder of every sextant device, by PCI address, and the mismatches of started
// pods, ordered by pod and resource.
func Compare(list []*podresourcesapi.PodResources, pods []*corev1.Pod) (map[string]Holder, []Mismatch) {
	byName := make(map[string]*corev1.Pod, len(pods))
	for _, p := range pods {
		byName[p.Namespace+"/"+p.Name] = p
	}
	holders := map[string]Holder{}
	var out []Mismatch
	for _, pr := range list {
		pod := byName[pr.GetNamespace()+"/"+pr.GetName()]
		h := Holder{Namespace: pr.GetNamespace(), Name: pr.GetName()}
		if pod != nil {
			h.UID = pod.UID
		}
		assigned := map[corev1.ResourceName][]string{}
		for _, c := range pr.GetContainers() {
			for _, d := range c.GetDevices() {
				res := corev1.ResourceName(d.GetResourceName())
				if _, ok := v1alpha1.DeviceKindOf(res); !ok {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					holders[id] = h
					if !slices.Contains(assigned[res], id) {
						assigned[res] = append(assigned[res], id)
					}
				}
			}
		}
		if pod == nil || !started(pod) {
			continue
		}
		value, ok := pod.Annotations[annotations.DevicesAllocated]
		if !ok {
			continue // placed by another scheduler: nothing to compare with
		}
		alloc, err := annotations.ParseAllocation(value)
		if err != nil {
			continue // never honoured by the plugin; the ranker and webhook report it
		}
		var resources []corev1.ResourceName
		for r := range alloc {
			resources = append(resources, r)
		}
		for r := range assigned {
			if _, ok := alloc[r]; !ok {
				resources = append(resources, r)
			}
		}
		slices.Sort(resources)
		for _, r := range resources {
			want, got := sortedCopy(alloc[r]), sortedCopy(assigned[r])
			extra := slices.ContainsFunc(got, func(id string) bool { return !slices.Contains(want, id) })
			missing := slices.ContainsFunc(want, func(id string) bool { return !slices.Contains(got, id) })
			if extra || missing && !plainInitAsks(pod, r) {
				out = append(out, Mismatch{Pod: pod, Resource: r, Annotated: want, Assigned: got})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Mismatch) int {
		return cmp.Or(strings.Compare(a.Pod.Namespace, b.Pod.Namespace), strings.Compare(a.Pod.Name, b.Pod.Name))
	})
	return holders, out
}

func sortedCopy(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// started: the kubelet has admitted the pod and run something of it, so its devices
// are assigned for good.
func started(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodRunning {
		return true
	}
	for _, sts := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, st := range sts {
			if st.State.Running != nil || st.State.Terminated != nil {
				return true
			}
		}
	}
	return false
}

// plainInitAsks: a non-restartable init container asks for r; PodResources does not
// list such containers, so devices only it holds are invisible.
func plainInitAsks(pod *corev1.Pod, r corev1.ResourceName) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			continue
		}
		if _, ok := c.Resources.Requests[r]; ok {
			return true
		}
		if _, ok := c.Resources.Limits[r]; ok {
			return true
		}
	}
	return false
}

// Config says who the auditor reports as.
type Config struct {
	// NodeName is this node's name, the events' source host.
	NodeName string
	// Component is the events' source component (default sextant-agent).
	Component string
	// Every is how often Run audits without being triggered (default 30s).
	Every time.Duration
	// OnHolders, if set, is called after a pass whose holders differ from the last
	// pass's (NodeTopology publishes them).
	OnHolders func(map[string]Holder)
	// Published are the holders this node's NodeTopology named before the agent
	// started. The first pass keeps those the kubelet forgot as it keeps the holders
	// of an earlier pass: a kubelet that restarted before the agent did no longer
	// lists them, and this agent never saw it list them.
	Published map[string]Holder
}

// Auditor runs the comparison against the kubelet and reports mismatches.
type Auditor struct {
	cfg     Config
	kube    kubernetes.Interface
	list    func(context.Context) ([]*podresourcesapi.PodResources, error)
	pods    func() ([]*corev1.Pod, error)
	metrics *Metrics
	log     logr.Logger
	now     func() time.Time
	trigger chan struct{}

	mu      sync.Mutex
	holders map[string]Holder
	// forgotten are the holders the kubelet stopped listing that the last pass kept.
	forgotten map[string]Holder
	reported  map[string]bool    // pod UID/resource counted already
	evented   map[types.UID]bool // pods whose event is recorded
}

// New returns an Auditor. list is the kubelet's PodResources List; pods the node's pods
// from the agent's shared pod cache.
func New(cfg Config, kube kubernetes.Interface, list func(context.Context) ([]*podresourcesapi.PodResources, error),
	pods func() ([]*corev1.Pod, error), m *Metrics, log logr.Logger) *Auditor {
	if cfg.Component == "" {
		cfg.Component = "sextant-agent"
	}
	if cfg.Every <= 0 {
		cfg.Every = 30 * time.Second
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	return &Auditor{cfg: cfg, kube: kube, list: list, pods: pods, metrics: m, log: log, now: time.Now,
		trigger: make(chan struct{}, 1), reported: map[string]bool{}, evented: map[types.UID]bool{}}
}

// Holders returns the holders the last pass found (nil before the first).
func (a *Auditor) Holders() map[string]Holder {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.holders
}

// Trigger asks Run for a pass soon (a pod on the node started).
func (a *Auditor) Trigger() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// Run audits every Every and on Trigger until ctx ends.
func (a *Auditor) Run(ctx context.Context) {
	t := time.NewTicker(a.cfg.Every)
	defer t.Stop()
	for {
		if _, err := a.Audit(ctx); err != nil && ctx.Err() == nil {
			a.log.Error(err, "device audit failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.trigger:
		}
	}
}

// Audit runs one pass: it reports new mismatches and returns them with the holders.
func (a *Auditor) Audit(ctx context.Context) ([]Mismatch, error) {
	list, err := a.list(ctx)
	if err != nil {
		a.metrics.audits.WithLabelValues("failed").Inc()
		return nil, fmt.Errorf("list the kubelet's pod resources: %w", err)
	}
	pods, err := a.pods()
	if err != nil {
		a.metrics.audits.WithLabelValues("failed").Inc()
		return nil, fmt.Errorf("list the node's pods: %w", err)
	}
	a.metrics.audits.WithLabelValues("ok").Inc()
	holders, mismatches := Compare(list, pods)

	a.mu.Lock()
	prev := a.holders
	if prev == nil {
		prev = a.cfg.Published
	}
	kept := keepForgotten(prev, holders, pods)
	for addr, h := range kept {
		if _, logged := a.forgotten[addr]; !logged {
			a.log.Info("the kubelet no longer lists the device of a pod still running on the node; keeping the pod as its holder",
				"device", addr, "pod", h.Namespace+"/"+h.Name)
		}
	}
	a.forgotten = kept
	changed := !mapsEqual(a.holders, holders)
	a.holders = holders
	live := map[types.UID]bool{}
	for _, p := range pods {
		live[p.UID] = true
	}
	for k := range a.reported {
		if uid, _, _ := strings.Cut(k, "/"); !live[types.UID(uid)] {
			delete(a.reported, k)
		}
	}
	for uid := range a.evented {
		if !live[uid] {
			delete(a.evented, uid)
		}
	}
	var fresh, unevented []Mismatch
	for _, m := range mismatches {
		k := string(m.Pod.UID) + "/" + string(m.Resource)
		if !a.reported[k] {
			a.reported[k] = true
			fresh = append(fresh, m)
		}
		if !a.evented[m.Pod.UID] {
			unevented = append(unevented, m)
		}
	}
	a.mu.Unlock()

	for _, m := range fresh {
		a.metrics.mismatches.WithLabelValues(string(m.Resource)).Inc()
		a.log.Info("devices differ from the ranker's choice", "pod", m.Pod.Namespace+"/"+m.Pod.Name,
			"resource", m.Resource, "annotated", m.Annotated, "assigned", m.Assigned)
	}
	// An event that could not be recorded is tried again on the next pass.
	for _, uid := range a.events(ctx, unevented) {
		a.mu.Lock()
		a.evented[uid] = true
		a.mu.Unlock()
	}
	if changed && a.cfg.OnHolders != nil {
		a.cfg.OnHolders(holders)
	}
	return mismatches, nil
}

// keepForgotten adds to holders each device that prev's holder still holds although the
// kubelet no longer lists it, and returns those. A PodResources List that arrives while
// the kubelet starts can read its active pods before it has admitted the node's pods
// again, then drop every pod's allocation as gone (the kubelet's devicemanager
// UpdateAllocatedDevices). The containers keep their devices, but the kubelet counts
// them free: without the holder the ranker would hand them to a second pod. A holder is
// kept while a pod with its UID is on the node and not terminal, no other pod is listed
// with the device, and the pod is listed with no device at all: the kubelet forgets a
// pod's allocation whole, and one that lists the pod with devices has given it those
// (again).
func keepForgotten(prev, holders map[string]Holder, pods []*corev1.Pod) map[string]Holder {
	live := map[types.UID]bool{}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live[p.UID] = true
		}
	}
	withDevices := map[Holder]bool{}
	for _, h := range holders {
		withDevices[h] = true
	}
	kept := map[string]Holder{}
	for addr, h := range prev {
		if _, listed := holders[addr]; listed || h.UID == "" || !live[h.UID] || withDevices[h] {
			continue
		}
		holders[addr] = h
		kept[addr] = h
	}
	return kept
}

func mapsEqual(a, b map[string]Holder) bool {
	if a == nil || len(a) != len(b) {
		return a == nil && b == nil
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// events records one Warning per pod, listing every resource that differs, and
// returns the pods it recorded one for.
func (a *Auditor) events(ctx context.Context, ms []Mismatch) []types.UID {
	var done []types.UID
	for len(ms) > 0 {
		pod := ms[0].Pod
		n := 1
		for n < len(ms) && ms[n].Pod.UID == pod.UID {
			n++
		}
		var parts []string
		for _, m := range ms[:n] {
			parts = append(parts, fmt.Sprintf("%s: the ranker chose [%s], the kubelet assigned [%s]",
				m.Resource, strings.Join(m.Annotated, ","), strings.Join(m.Assigned, ",")))
		}
		if a.event(ctx, pod, strings.Join(parts, "; ")) {
			done = append(done, pod.UID)
		}
		ms = ms[n:]
	}
	return done
}

// event records the Warning. Its name is derived from the pod, so an agent that
// restarts and finds the same again creates nothing new.
func (a *Auditor) event(ctx context.Context, pod *corev1.Pod, msg string) bool {
	src := nodepods.Source{Node: a.cfg.NodeName, Component: a.cfg.Component, Controller: "sextant.io/device-audit"}
	ev := nodepods.NewPodEvent(src, pod, nodepods.PodEvent{Type: corev1.EventTypeWarning, Reason: ReasonMismatch,
		Suffix: "device-mismatch", Message: msg}, a.now())
	if a.kube == nil {
		return true
	}
	if err := nodepods.CreateEvent(ctx, a.kube, a.cfg.NodeName, ev, a.log); err != nil {
		a.log.Error(err, "could not record an event", "pod", pod.Namespace+"/"+pod.Name, "reason", ReasonMismatch)
		return false
	}
	return true
}

// Metrics are the auditor's Prometheus metrics.
type Metrics struct {
	mismatches *prometheus.CounterVec
	audits     *prometheus.CounterVec
}

// NewMetrics registers the auditor's metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_device_allocation_mismatches_total",
			Help: "Started pods whose devices of a resource, as the kubelet's PodResources lists them, differ from their devices.sextant.io/allocated; counted once per pod and resource.",
		}, []string{"resource"}),
		audits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_device_audits_total",
			Help: "Passes comparing the kubelet's PodResources with the pods' device annotations, by result (ok, failed).",
		}, []string{"result"}),
	}
	for _, k := range v1alpha1.RequestableDeviceKinds {
		m.mismatches.WithLabelValues(string(k.ResourceName()))
	}
	m.audits.WithLabelValues("ok")
	m.audits.WithLabelValues("failed")
	if reg != nil {
		reg.MustRegister(m.mismatches, m.audits)
	}
	return m
}
