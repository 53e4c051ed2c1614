package numapin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"sextant.io/sextant/agent/cgroups"
	"sextant.io/sextant/agent/nodepods"
	"sextant.io/sextant/agent/topology"
	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/cri"
	"sextant.io/sextant/internal/liveness"
)

// Config tunes a Pinner.
type Config struct {
	// NodeName is the node whose pods are pinned.
	NodeName string
	// CgroupRoot is where the node's cgroups are mounted (/sys/fs/cgroup).
	CgroupRoot string
	// KubepodsCgroup is the kubepods cgroup relative to the cpuset hierarchy when the
	// kubelet runs with --cgroup-root; empty finds "kubepods.slice" or "kubepods".
	KubepodsCgroup string
	// Resync is how often every annotated pod's cgroup is checked again.
	Resync time.Duration
	// Workers is how many pods are pinned concurrently.
	Workers int
	// Component names the agent in the Events it records.
	Component string
	// RuntimeTimeout bounds each call to the container runtime.
	RuntimeTimeout time.Duration
}

// Runtime is what pinning needs of the node's container runtime; *cri.Client is one.
type Runtime interface {
	// PodContainers lists every container the runtime holds for the pod.
	PodContainers(ctx context.Context, podUID string) ([]cri.Container, error)
	// ContainerCpuset is the cpuset the runtime's record of the container holds.
	ContainerCpuset(ctx context.Context, id string) (cpus, mems string, err error)
	// UpdateCpuset records a new cpuset for the container, keeping its other resources.
	UpdateCpuset(ctx context.Context, id, cpus, mems string) error
}

// NUMANodes returns the node's NUMA nodes as the agent reads and publishes them.
type NUMANodes func() ([]v1alpha1.NUMANode, error)

// FromCache reads the NUMA nodes from the agent's topology cache.
func FromCache(c *topology.Cache) NUMANodes {
	return func() ([]v1alpha1.NUMANode, error) {
		snap, err := c.Get()
		if err != nil {
			return nil, err
		}
		return snap.Topology.NUMANodes, nil
	}
}

// KubeletPinning says which of the kubelet's resource managers set containers' cpusets
// themselves: the CPU manager under its static policy (cpuset.cpus), the memory manager
// under its Static policy (cpuset.mems).
type KubeletPinning struct{ StaticCPU, StaticMemory bool }

// KubeletPolicies asks the kubelet which of its managers pin (PodResources).
type KubeletPolicies func(ctx context.Context) (KubeletPinning, error)

// Pinner confines the pods of its node to the NUMA nodes their numa.sextant.io/nodes
// annotation names.
type Pinner struct {
	cfg     Config
	kube    kubernetes.Interface
	pods    cache.SharedIndexInformer
	rt      Runtime
	numa    NUMANodes
	static  KubeletPolicies
	metrics *Metrics
	log     logr.Logger
	now     func() time.Time

	queue   workqueue.TypedRateLimitingInterface[string]
	rtQueue workqueue.TypedRateLimitingInterface[string]

	kubepods atomic.Pointer[cgroups.Kubepods]
	watcher  atomic.Pointer[cgroups.Watcher]
	// staticCPU and staticMemory are the last answer of the kubelet policy check;
	// policyKnown says there was one. Until then nothing is pinned: under either static
	// policy the kubelet writes containers' cpusets itself, and a narrowed pod cgroup
	// would make them fail to start (cgroup v1) or lose what the kubelet gave them (v2).
	staticCPU    atomic.Bool
	staticMemory atomic.Bool
	policyKnown  atomic.Bool
	// started is when the Pinner was made: State turns from Pending to Unknown
	// pendingLimit after it if the kubelet has not answered.
	started time.Time
	ready   atomic.Bool // the cgroup watch runs
	synced  atomic.Bool // the pod cache has synced
	// beat and rtBeat are marked while the kubelet's cgroups are awaited, and whenever
	// a worker of queue, or of rtQueue, takes out the probe the resync puts in.
	beat, rtBeat liveness.Beat

	mu    sync.Mutex
	state map[types.UID]*podState
}

// podState is what this process knows of one annotated pod. mu is held while a worker
// works on the pod.
type podState struct {
	mu sync.Mutex
	// seen is when this process first saw the pod bound here.
	seen time.Time
	// fresh: the pod had no container cgroup when this process first looked, so a pin
	// now is the pod's first (and counted); a pod found pinned with running containers
	// after a restart is not counted again.
	fresh  bool
	looked bool
	// value and want are the decision carried out: the first annotation value, and the
	// cpuset it means on this node.
	value   string
	want    cgroups.Cpuset
	decided bool
	// refused is set once a decision was refused, so it is reported once.
	refused string
	changed bool // an annotation change was reported
	// foreign is the set another writer had narrowed the pod's cgroup to when this
	// process first looked (an agent restarted after it).
	foreign string
	// narrowedAt and path: when and how this process last narrowed the pod's cgroup.
	narrowedAt time.Time
	path       string
	// confirmed: the pod's cgroup held the set with at least one child in it.
	confirmed bool
	dir       string
	// checked are the container IDs whose runtime record was looked at.
	checked map[string]bool
	// announce is the NUMAPinned event's message until it is recorded.
	announce string
}

// New makes a Pinner over the shared informer of the node's pods (nodepods.NewInformer),
// which the caller runs; Run starts the pinner.
func New(cfg Config, kube kubernetes.Interface, pods cache.SharedIndexInformer, rt Runtime, numa NUMANodes, static KubeletPolicies, metrics *Metrics, log logr.Logger) (*Pinner, error) {
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.Component == "" {
		cfg.Component = "sextant-agent"
	}
	if cfg.RuntimeTimeout <= 0 {
		cfg.RuntimeTimeout = 10 * time.Second
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	p := &Pinner{
		cfg: cfg, kube: kube, pods: pods, rt: rt, numa: numa, static: static, metrics: metrics, log: log, now: time.Now,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "numa-pin"}),
		rtQueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "numa-runtime"}),
		state: map[types.UID]*podState{},
	}
	p.started = p.now()
	_, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.onPod,
		UpdateFunc: func(_, obj any) { p.onPod(obj) },
		DeleteFunc: p.onDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("numa pinning: watch pods: %w", err)
	}
	return p, nil
}

// Ready says the pinner found the kubelet's pod cgroups, watches them, and has its pods.
func (p *Pinner) Ready() bool { return p.ready.Load() && p.synced.Load() }

// LastAlive is when the pinner last showed it turns: the resync ticked, and workers of
// both its queues took the probe out. It stays old when the workers of either queue
// are all blocked.
func (p *Pinner) LastAlive() time.Time {
	a, b := p.beat.Last(), p.rtBeat.Last()
	if b.Before(a) {
		return b
	}
	return a
}

// LivenessInterval is how often LastAlive moves while all is well: the resync, or the
// retry while the kubelet's cgroups are awaited, whichever is longer.
func (p *Pinner) LivenessInterval() time.Duration { return max(p.cfg.Resync, kubepodsRetry) }

// kubepodsRetry is how often the kubelet's cgroups are looked for until found.
const kubepodsRetry = 5 * time.Second

func (p *Pinner) onPod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if _, annotated := pod.Annotations[annotations.NUMANodes]; !annotated {
		return // never touched
	}
	p.mu.Lock()
	if _, ok := p.state[pod.UID]; !ok {
		p.state[pod.UID] = &podState{seen: p.now(), checked: map[string]bool{}}
	}
	p.mu.Unlock()
	p.enqueue(pod)
}

func (p *Pinner) onDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		p.forget(pod.UID)
	}
}

func (p *Pinner) forget(uid types.UID) {
	p.mu.Lock()
	st, ok := p.state[uid]
	delete(p.state, uid)
	p.mu.Unlock()
	if !ok {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if w := p.watcher.Load(); w != nil && st.dir != "" {
		w.Unfollow(st.dir)
	}
	if st.confirmed {
		p.metrics.pinned.Dec()
	}
}

func (p *Pinner) enqueue(pod *corev1.Pod) {
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		p.queue.Add(key)
	}
}

// probe puts the liveness probe in both queues.
func (p *Pinner) probe() {
	p.queue.Add(liveness.ProbeKey)
	p.rtQueue.Add(liveness.ProbeKey)
}

func (p *Pinner) enqueueAll() {
	for _, obj := range p.pods.GetStore().List() {
		p.onPod(obj)
	}
}

// policyRetry is how soon the kubelet is asked again for its CPU and memory manager
// policies while it has not answered.
const policyRetry = 2 * time.Second

// pendingLimit is how long the kubelet may take to answer before the node stops
// counting as one that pins: the ranker places pods on a Pending node as if it pinned
// them, which holds only if the answer comes soon.
const pendingLimit = 30 * time.Second

// Run works until ctx ends.
func (p *Pinner) Run(ctx context.Context) error {
	defer p.queue.ShutDown()
	defer p.rtQueue.ShutDown()
	kp, err := p.findKubepods(ctx)
	if err != nil {
		return err
	}
	p.checkStaticPolicy(ctx)

	// Workers start before the pod cache has synced: every pod the initial list brings
	// is queued by its own event, and a restarted agent catches up the first pods
	// without waiting for the last.
	p.probe()
	var wg sync.WaitGroup
	wg.Go(func() { p.watch(ctx, kp) })
	for range p.cfg.Workers {
		wg.Go(func() {
			for p.processNext(ctx) {
			}
		})
	}
	wg.Go(func() {
		for p.processRuntime(ctx) {
		}
	})
	// A kubelet that did not answer at the start (restarting, or a wrong PodResources
	// socket) is asked again soon, not only at the next resync.
	wg.Go(func() {
		for !p.policyKnown.Load() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(policyRetry):
			}
			p.checkStaticPolicy(ctx)
		}
	})
	wg.Go(func() {
		tick := time.NewTicker(p.cfg.Resync)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				p.probe()
				p.checkStaticPolicy(ctx)
				p.enqueueAll()
			}
		}
	})
	if !cache.WaitForCacheSync(ctx.Done(), p.pods.HasSynced) {
		p.queue.ShutDown()
		p.rtQueue.ShutDown()
		wg.Wait()
		return errors.New("numa pinning: pod cache did not sync")
	}
	p.synced.Store(true)
	p.enqueueAll()
	<-ctx.Done()
	p.ready.Store(false)
	p.queue.ShutDown()
	p.rtQueue.ShutDown()
	wg.Wait()
	return nil
}

// findKubepods waits for the kubelet's cgroups: the agent may start before the kubelet.
func (p *Pinner) findKubepods(ctx context.Context) (*cgroups.Kubepods, error) {
	logged := false
	for {
		h, err := cgroups.DetectHierarchy(p.cfg.CgroupRoot)
		if err == nil {
			var kp *cgroups.Kubepods
			if kp, err = cgroups.FindKubepods(h, p.cfg.KubepodsCgroup); err == nil {
				p.kubepods.Store(kp)
				p.log.Info("pinning pods to their NUMA nodes", "cgroup", h.Version.String(), "kubepods", kp.Dir, "systemdDriver", kp.Systemd)
				return kp, nil
			}
		}
		if !logged {
			p.log.Error(err, "no kubelet pod cgroups yet; NUMA pinning waits for them")
			logged = true
		}
		// Waiting for the kubelet is not being stuck.
		now := p.now()
		p.beat.Mark(now)
		p.rtBeat.Mark(now)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(kubepodsRetry):
		}
	}
}

// watch turns pod cgroups being created into pinning work, watching again when the
// watch breaks.
func (p *Pinner) watch(ctx context.Context, kp *cgroups.Kubepods) {
	backoff := time.Second
	for ctx.Err() == nil {
		w, err := kp.Watch()
		if err == nil {
			p.watcher.Store(w)
			p.ready.Store(true)
			p.enqueueAll() // cgroups made while there was no watch
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			for uid := range w.UIDs {
				if uid == cgroups.Rescan {
					p.enqueueAll()
					continue
				}
				if pod, ok := nodepods.ByUID(p.pods, uid); ok {
					p.enqueue(pod)
				}
			}
			err = <-done
			p.ready.Store(false)
		}
		if ctx.Err() != nil {
			return
		}
		p.log.Error(err, "the pod cgroup watch broke; watching again", "after", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// State is whether the Pinner carries out the ranker's NUMA decisions now, as the
// node's NodeTopology publishes it: Pending until the kubelet has said whether it runs
// a static policy (Unknown once that has taken longer than pendingLimit), then
// KubeletStaticCPUManager, KubeletStaticMemoryManager or Active.
func (p *Pinner) State() v1alpha1.NUMAPinning {
	switch {
	case !p.policyKnown.Load() && p.now().Sub(p.started) > pendingLimit:
		return v1alpha1.PinningUnknown
	case !p.policyKnown.Load():
		return v1alpha1.PinningPending
	case p.staticCPU.Load():
		return v1alpha1.PinningKubeletStaticCPUManager
	case p.staticMemory.Load():
		return v1alpha1.PinningKubeletStaticMemoryManager
	default:
		return v1alpha1.PinningActive
	}
}

func (p *Pinner) checkStaticPolicy(ctx context.Context) {
	if p.static == nil {
		p.policyKnown.Store(true)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.RuntimeTimeout)
	policies, err := p.static(cctx)
	cancel()
	if err != nil {
		if p.policyKnown.Load() {
			p.log.Error(err, "could not ask the kubelet for its CPU and memory manager policies; keeping its last answer",
				"staticCPU", p.staticCPU.Load(), "staticMemory", p.staticMemory.Load())
		} else {
			p.log.Error(err, "could not ask the kubelet for its CPU and memory manager policies; pinning nothing until it answers")
		}
		return
	}
	// The answer is stored before it is marked known: a worker that sees it known
	// must see what it says.
	if was := p.staticCPU.Swap(policies.StaticCPU); !was && policies.StaticCPU {
		p.log.Info("the kubelet runs the static CPU manager policy and sets containers' cpusets itself; sextant pins no pod on this node (see docs/numa.md)")
	}
	if was := p.staticMemory.Swap(policies.StaticMemory); !was && policies.StaticMemory {
		p.log.Info("the kubelet runs the Static memory manager policy and sets containers' memory nodes itself; sextant pins no pod on this node (see docs/numa.md)")
	}
	if !p.policyKnown.Swap(true) {
		// Pods that waited for the answer go now.
		p.enqueueAll()
	}
}

func (p *Pinner) processNext(ctx context.Context) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(key)
	if key == liveness.ProbeKey {
		p.beat.Mark(p.now())
		return true
	}
	if err := p.reconcile(ctx, key); errors.Is(err, errPolicyUnknown) {
		// Not the pod's failure, and no retry: every pod is queued again when the
		// kubelet answers.
		p.queue.Forget(key)
		return true
	} else if err != nil {
		if ctx.Err() == nil {
			n := p.queue.NumRequeues(key)
			if errors.Is(err, cgroups.ErrNoCpuset) && n < failingAfter-1 {
				// Counted and logged only if it lasts failingAfter attempts: the files
				// come a moment after the pod's cgroup.
				p.log.V(1).Info("the pod's cgroup has no cpuset files yet; retrying", "pod", key, "detail", err.Error())
			} else {
				if errors.Is(err, cgroups.ErrNoCpuset) {
					p.metrics.failures.WithLabelValues(reasonCgroup).Inc()
				}
				p.log.Error(err, "pinning a pod to its NUMA nodes failed; retrying", "pod", key)
			}
			if n == failingAfter-1 {
				p.failing(ctx, key, err)
			}
		}
		p.queue.AddRateLimited(key)
		return true
	}
	p.queue.Forget(key)
	return true
}

// errPolicyUnknown holds every pod back until the kubelet answers: not a failure of the
// pod's.
var errPolicyUnknown = errors.New("the kubelet has not said whether it runs a static CPU or memory manager policy (PodResources); the pod is pinned once it has")

// failingAfter is how many failed attempts in a row make a pod's pinning failure an
// Event: a cgroup the kubelet is still setting up may fail an attempt or two.
const failingAfter = 3

// failing records a Warning Event on a pod whose pinning keeps failing, once per pod:
// the failures counter says some pod is not confined, the Event says which and why.
func (p *Pinner) failing(ctx context.Context, key string, err error) {
	obj, exists, gerr := p.pods.GetStore().GetByKey(key)
	if gerr != nil || !exists {
		return
	}
	pod := obj.(*corev1.Pod)
	p.event(ctx, pod, corev1.EventTypeWarning, "NUMAPinFailing", "numa-failing",
		fmt.Sprintf("not confined to the NUMA nodes in %s after %d attempts: %v; retrying", annotations.NUMANodes, failingAfter, err))
}

// reconcile makes the cgroup of one pod hold the cpuset of its NUMA nodes.
func (p *Pinner) reconcile(ctx context.Context, key string) error {
	obj, exists, err := p.pods.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil
	}
	pod := obj.(*corev1.Pod)
	value, annotated := pod.Annotations[annotations.NUMANodes]
	if !annotated {
		return nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		p.forget(pod.UID)
		return nil
	}
	p.mu.Lock()
	st, ok := p.state[pod.UID]
	p.mu.Unlock()
	if !ok {
		return nil // deleted meanwhile
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !p.policyKnown.Load() {
		return errPolicyUnknown
	}
	if p.staticCPU.Load() {
		p.refuse(ctx, pod, st, &refusal{reasonStaticCPUManager,
			"the kubelet runs the static CPU manager policy, which sets cpusets itself; sextant leaves this pod's CPUs to it"})
		return nil
	}
	if p.staticMemory.Load() {
		p.refuse(ctx, pod, st, &refusal{reasonStaticMemManager,
			"the kubelet runs the Static memory manager policy, which sets memory nodes itself; sextant leaves this pod to it"})
		return nil
	}
	kp := p.kubepods.Load()
	dir, hasCgroup := kp.PodDir(string(pod.UID))

	if !st.decided {
		if err := p.decide(ctx, pod, st, value, kp, dir, hasCgroup); err != nil {
			return err
		}
		if !st.decided {
			return nil // refused
		}
	} else if value != st.value && !st.changed {
		st.changed = true
		p.metrics.failures.WithLabelValues(reasonChanged).Inc()
		p.event(ctx, pod, corev1.EventTypeWarning, "NUMAAnnotationChanged", "numa-changed",
			fmt.Sprintf("%s changed from %q to %q after the pod was placed; the first decision stands (%s)", annotations.NUMANodes, st.value, value, st.want))
	}
	if !hasCgroup {
		if !st.looked {
			st.looked, st.fresh = true, true
		}
		return nil // the watch brings the pod back once the kubelet makes its cgroup
	}
	return p.pin(ctx, pod, st, kp, dir)
}

// decide turns the annotation into the cpuset to enforce, once per pod.
func (p *Pinner) decide(ctx context.Context, pod *corev1.Pod, st *podState, value string, kp *cgroups.Kubepods, dir string, hasCgroup bool) error {
	ids, err := annotations.ParseNUMANodes(value)
	if err != nil {
		p.refuse(ctx, pod, st, &refusal{reasonMalformed, err.Error()})
		return nil
	}
	numa, err := p.numa()
	if err != nil {
		p.metrics.failures.WithLabelValues(reasonTopology).Inc()
		return fmt.Errorf("read the node's NUMA nodes: %w", err)
	}
	want, err := target(ids, numa)
	if r := (*refusal)(nil); errors.As(err, &r) {
		p.refuse(ctx, pod, st, r)
		return nil
	} else if err != nil {
		return err
	}
	// A pod cgroup this process finds narrowed to another set was narrowed by someone
	// else: the annotation, which admission keeps as the ranker wrote it on the Binding,
	// is the decision, so the set is repaired, not adopted.
	if hasCgroup {
		if cur, err := kp.Requested(dir); err == nil && !cur.Equal(want) && p.narrowed(kp, dir, cur) {
			st.foreign = cur.String()
		}
	}
	st.value, st.want, st.decided = value, want, true
	return nil
}

// narrowed says whether the pod cgroup dir, asking for cur, asks for less than its
// parent has, i.e. was narrowed by someone.
func (p *Pinner) narrowed(kp *cgroups.Kubepods, dir string, cur cgroups.Cpuset) bool {
	parent, err := kp.Effective(filepath.Dir(dir))
	if err != nil {
		return false
	}
	if kp.Version == cgroups.V2 {
		// An empty part asks for the parent's.
		if len(cur.CPUs) == 0 {
			cur.CPUs = parent.CPUs
		}
		if len(cur.Mems) == 0 {
			cur.Mems = parent.Mems
		}
	} else if len(cur.CPUs) == 0 || len(cur.Mems) == 0 {
		// Nothing written yet, or the kubelet's copy of the parent's set half written
		// (libcontainer writes cpus, then mems): no one's narrowing.
		return false
	}
	return cur.Within(parent) && !cur.Equal(parent)
}

// pin narrows the pod's cgroup if it does not hold the set, and confirms the pin once
// the pod has a child cgroup inside the narrowed one.
func (p *Pinner) pin(ctx context.Context, pod *corev1.Pod, st *podState, kp *cgroups.Kubepods, dir string) error {
	st.dir = dir
	children, err := cgroups.Children(dir)
	if errors.Is(err, cgroups.ErrGone) {
		return nil
	} else if err != nil {
		return err
	}
	if !st.looked {
		st.looked, st.fresh = true, len(children) == 0
	}
	eff, err := kp.Effective(dir)
	if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("cgroup %s has no cpuset files: %w", dir, cgroups.Missing(dir))
	}
	if errors.Is(err, cgroups.ErrGone) {
		return nil
	} else if err != nil {
		return err
	}
	if !eff.Equal(st.want) {
		res, err := kp.Narrow(dir, st.want)
		if errors.Is(err, cgroups.ErrGone) {
			return nil
		}
		if err != nil {
			p.metrics.failures.WithLabelValues(reasonCgroup).Inc()
			return err
		}
		switch {
		case st.confirmed, st.foreign != "":
			st.path = pathRepair
		case res.Children == 0 && st.path != pathCatchUp:
			st.path = pathPodCgroup
		default:
			st.path = pathCatchUp
		}
		st.narrowedAt = p.now()
		if st.confirmed {
			p.metrics.pins.WithLabelValues(pathRepair).Inc()
			p.log.Info("a pinned pod's cgroup had been widened; narrowed it again", "pod", pod.Namespace+"/"+pod.Name, "cpuset", st.want.String())
		} else if st.foreign != "" {
			p.event(ctx, pod, corev1.EventTypeWarning, "NUMAPinRepaired", "numa-repaired",
				fmt.Sprintf("The pod's cgroup held %s, not the set %s=%q means on this node (%s); narrowed it to that set", st.foreign, annotations.NUMANodes, st.value, st.want))
			p.log.Info("a pod's cgroup had been narrowed to another set than its NUMA nodes; narrowed it to theirs", "pod", pod.Namespace+"/"+pod.Name,
				"found", st.foreign, "cpuset", st.want.String())
		}
		// The kernel is the judge: on v2 the set in force is also bounded by the
		// parents' (a kubepods cgroup without those CPUs, say).
		if eff, err = kp.Effective(dir); err != nil {
			return err
		}
		if !eff.Equal(st.want) {
			p.metrics.failures.WithLabelValues(reasonCgroup).Inc()
			return fmt.Errorf("cgroup %s holds %s after narrowing it to %s", dir, eff, st.want)
		}
		children, err = cgroups.Children(dir)
		if err != nil {
			return nil
		}
	}
	if len(children) == 0 {
		// Pinned, but only confirmed once a container cgroup exists inside the narrowed
		// one: on v1 the kubelet copies the parent's set into a new pod cgroup right after
		// making it, and that copy can land after the narrowing. Following the cgroup
		// brings the pod back at that write and when the sandbox's cgroup appears.
		if w := p.watcher.Load(); w != nil {
			if err := w.Follow(string(pod.UID), dir); err != nil {
				p.log.Error(err, "cannot follow a pod cgroup; the resync checks it instead", "dir", dir)
			}
		}
		return nil
	}
	if !st.confirmed {
		st.confirmed = true
		if w := p.watcher.Load(); w != nil {
			w.Unfollow(dir)
		}
		if st.path == "" && st.fresh {
			st.path, st.narrowedAt = pathPodCgroup, p.now() // the cgroup already held the set (one NUMA node)
		}
		if st.path != "" {
			took := st.narrowedAt.Sub(st.seen)
			p.metrics.pins.WithLabelValues(st.path).Inc()
			p.metrics.pinSeconds.WithLabelValues(st.path).Observe(max(took, 0).Seconds())
			// Recorded by the runtime worker: an API call here would delay the next pods' pins.
			// The event's name is the pod's: for a pod an earlier agent announced (most
			// repaired ones), nothing new is recorded.
			st.announce = fmt.Sprintf("Confined to NUMA nodes %s: %s (%s, %s after the pod was seen bound)", st.value, st.want, st.path, took.Round(time.Millisecond))
			p.log.Info("pinned a pod to its NUMA nodes", "pod", pod.Namespace+"/"+pod.Name, "numaNodes", st.value,
				"cpuset", st.want.String(), "path", st.path, "seconds", took.Seconds())
		}
		// After the pin's path is counted: whoever sees the pod pinned sees how.
		p.metrics.pinned.Inc()
	}
	p.rtQueue.Add(keyOf(pod))
	return nil
}

func (p *Pinner) refuse(ctx context.Context, pod *corev1.Pod, st *podState, r *refusal) {
	if st.refused == r.reason {
		return
	}
	st.refused = r.reason
	p.metrics.failures.WithLabelValues(r.reason).Inc()
	if r.reason == reasonStaticCPUManager || r.reason == reasonStaticMemManager {
		return // said once for the node, in the log; an event per pod would be noise
	}
	p.event(ctx, pod, corev1.EventTypeWarning, "NUMAPinRefused", "numa-refused",
		fmt.Sprintf("Not confined to NUMA nodes %q: %s", pod.Annotations[annotations.NUMANodes], r.msg))
	p.log.Info("not pinning a pod to its NUMA nodes", "pod", pod.Namespace+"/"+pod.Name, "reason", r.reason, "detail", r.msg)
}

func keyOf(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }
