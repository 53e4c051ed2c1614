package numapin

import (
	"context"
	"errors"
	"fmt"
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
	// phase is how far the pod's decision is carried out; it moves by advance only.
	phase phase
	// seen is when this process first saw the pod bound here.
	seen time.Time
	// value and want are the decision carried out once decided: the first annotation
	// value, and the cpuset it means on this node.
	value string
	want  cgroups.Cpuset
	// foreign is the set another writer had narrowed the pod's cgroup to when this
	// process first looked (an agent restarted after it).
	foreign string
	// narrowedAt and path: when and how this process last narrowed the pod's cgroup.
	narrowedAt time.Time
	path       string
	dir        string
	// checked are the container IDs whose runtime record was looked at.
	checked map[string]bool

	// What was reported, kept so that it is reported once: refused is the last refusal,
	// changed the annotation's change, announce the NUMAPinned event's message until the
	// runtime worker records it.
	refused  string
	changed  bool
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
	if st.confirmed() {
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

// failingAfter is how many failed attempts in a row make a pod's pinning failure an
// Event: a cgroup the kubelet is still setting up may fail an attempt or two.
const failingAfter = 3

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
	if r, err := p.gate(); err != nil {
		return err
	} else if r != nil {
		p.refuse(ctx, pod, st, r)
		return nil
	}
	kp := p.kubepods.Load()
	dir, hasCgroup := kp.PodDir(string(pod.UID))

	if !st.decided() {
		if err := p.decide(ctx, pod, st, value, kp, dir, hasCgroup); err != nil {
			return err
		}
		if !st.decided() {
			return nil // refused
		}
	} else if value != st.value && !st.changed {
		st.changed = true
		p.reportChanged(ctx, pod, st, value)
	}
	if !hasCgroup {
		st.advance(stepLookEmpty)
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
	st.value, st.want = value, want
	st.advance(stepDecide)
	return nil
}

func keyOf(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }
