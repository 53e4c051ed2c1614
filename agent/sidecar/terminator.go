package sidecar

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"sextant.io/sextant/agent/nodepods"
	"sextant.io/sextant/agent/procsignal"
	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/sidecarrules"
	"sextant.io/sextant/cri"
	"sextant.io/sextant/internal/liveness"
)

// Config tunes a Terminator.
type Config struct {
	// NodeName is the node whose pods the terminator handles; it watches only those.
	NodeName string
	// PodSelector is a label selector limiting the pods handled; empty: all of them.
	PodSelector string
	// Resync is how often every pod with sidecars is looked at again, whatever the
	// events said: a safety net for a missed event, not the way stops are found.
	Resync time.Duration
	// Workers is how many pods are looked at concurrently (default DefaultWorkers).
	Workers int
	// Component names the agent in the Events it records.
	Component string
	// APITimeout bounds each call to the API server (default 10s): a call that hangs
	// must not hold a worker, and with every worker held, every stop on the node.
	APITimeout time.Duration
	// StateDir holds the stop marks, one file per container (required): a directory
	// that outlives the agent, the agent's --state-dir.
	StateDir string
	// Signaller, if set, sends a sidecar's stop signal straight to its process, and the
	// runtime is asked to stop the container only if it outlives its grace period. Nil,
	// or for a container whose process or stop signal it cannot tell, the runtime's
	// StopContainer does both.
	Signaller Signaller
	// Exits, if set, reports the exits of restartPolicy Never pods' main containers as
	// their processes end (procsignal.Exits), before containerd's exit event; the
	// terminator's ProcessExited must be its callback. Only Never pods are watched: their
	// sidecars stop once every main exited, whatever its exit code, which only
	// containerd can tell.
	Exits ExitWatcher
}

// ExitWatcher reports the exit of a container's process, by its host PID, once
// (procsignal.Exits).
type ExitWatcher interface {
	Watch(pid uint32, containerID string) error
}

// Signaller sends a signal to a container's main process by its host PID, and refuses
// when that process is not the container's (procsignal.Signaller).
type Signaller interface {
	Signal(pid uint32, containerID string, sig syscall.Signal) error
}

// Terminator stops the sidecars of its node's pods as the rules say. It learns of exits
// from the runtime's event stream (and, slower, from the kubelet's pod status updates
// and a periodic resync), reads the state of a pod's containers from the exits it heard
// and the runtime, and stops a sidecar by signalling its process (Config.Signaller) or
// through the runtime.
type Terminator struct {
	cfg     Config
	kube    kubernetes.Interface
	rt      cri.Runtime
	metrics *Metrics
	log     logr.Logger
	now     func() time.Time

	informer cache.SharedIndexInformer
	selector labels.Selector
	queue    workqueue.TypedRateLimitingInterface[string]
	marks    markFiles
	// stops are the stops running in goroutines of their own; Run waits for them.
	stops sync.WaitGroup

	mu       sync.Mutex
	inflight map[string]bool      // container IDs this process is stopping now
	exits    map[string]heardExit // recent exits seen as events, by container ID
	pids     map[string]uint32    // host PIDs of running containers, from start events
	// exited are closed when the exit of the container they are kept for is heard: a
	// stop that signalled the process itself waits on one.
	exited map[string]chan struct{}
	// watching are the main containers whose processes Config.Exits watches, and the
	// keys of their pods: the kubelet may not yet have reported a container's ID.
	watching map[string]string
	// ended are the sidecars whose processes the agent signalled and Config.Exits
	// watches, with when each process ended (zero until it has): the end of the span
	// sextant_sidecar_stop_process_seconds measures. Their exit codes still come from
	// containerd's events.
	ended map[string]time.Time
	// reported is closed, and replaced, whenever containerd deletes an exited task: the
	// CRI is recording that container's exit, which a stop of a native sidecar waits for.
	reported chan struct{}
	// records are containerd's records of the node's sidecar pods' containers, by ID:
	// what never changes for a container (pod, name, attempt, creation, stop signal).
	records map[string]cri.Container
	// running are the containers the runtime last reported running, by ID, kept only
	// while the exit stream that would report their exits is proven live (streamLive):
	// a pass over a pod whose sidecar runs then asks the runtime nothing, which under a
	// burst of exits keeps the workers off containerd (docs/design/0077). An exit heard,
	// a broken stream or the kubelet reporting the container terminated drops an entry.
	running map[string]cri.Container
	// stream counts subscriptions to the exit stream; streamLive is set once the
	// current one has delivered an event, which proves containerd is sending it ours.
	stream     uint64
	streamLive atomic.Bool
	settled    map[types.UID]bool   // finished pods with nothing left to do
	recorded   map[string]time.Time // container IDs whose stop this process recorded
	left       map[leftKey]bool     // sidecars left running whose Event this process recorded
	// following is true while a subscription to the exit stream is open; false while
	// it is broken and being retried, so readiness shows an agent that hears no exits.
	following atomic.Bool
	synced    atomic.Bool
	// beat is marked while the pod cache syncs and whenever a worker takes the probe
	// the resync puts in the queue.
	beat liveness.Beat
}

// heardExit is an exit event and when it arrived.
type heardExit struct {
	cri.TaskEvent
	heard time.Time
	// fromProcess is an exit Config.Exits reported, before containerd's event: the exit
	// code is unknown (zero).
	fromProcess bool
}

// leftKey is one container of one pod, whatever its attempt.
type leftKey struct {
	pod       types.UID
	container string
}

// DefaultWorkers is how many pods a Terminator looks at concurrently by default. A look
// spends its time waiting on containerd, not on the CPU, so with only a couple the pods of
// a burst of finishing Jobs queue behind one another (docs/design/0073).
const DefaultWorkers = 16

// exitMemory is how long an exit seen as an event overrides what the runtime's
// container list says: the CRI plugin updates its own state from the same event, and
// may not have done so when the terminator asks.
const exitMemory = 2 * time.Minute

// New makes a Terminator over the shared informer of the node's pods
// (nodepods.NewInformer), which the caller runs; Run starts the terminator.
func New(cfg Config, kube kubernetes.Interface, pods cache.SharedIndexInformer, rt cri.Runtime, metrics *Metrics, log logr.Logger) (*Terminator, error) {
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Component == "" {
		cfg.Component = "sextant-agent"
	}
	if cfg.APITimeout <= 0 {
		cfg.APITimeout = 10 * time.Second
	}
	if cfg.StateDir == "" {
		return nil, errors.New("sidecar terminator: no state directory for the stop marks")
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	selector, err := labels.Parse(cfg.PodSelector)
	if err != nil {
		return nil, fmt.Errorf("sidecar terminator: pod selector %q: %w", cfg.PodSelector, err)
	}
	t := &Terminator{
		cfg: cfg, kube: kube, rt: rt, metrics: metrics, log: log, now: time.Now,
		informer: pods, selector: selector, marks: markFiles{dir: filepath.Join(cfg.StateDir, "sidecar-stops")},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "sidecar"}),
		inflight: map[string]bool{},
		exits:    map[string]heardExit{},
		pids:     map[string]uint32{},
		exited:   map[string]chan struct{}{},
		watching: map[string]string{},
		ended:    map[string]time.Time{},
		records:  map[string]cri.Container{},
		running:  map[string]cri.Container{},
		reported: make(chan struct{}),
		settled:  map[types.UID]bool{},
		recorded: map[string]time.Time{},
		left:     map[leftKey]bool{},
	}
	_, err = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.enqueuePod,
		UpdateFunc: func(_, obj any) { t.enqueuePod(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				t.mu.Lock()
				delete(t.settled, pod.UID)
				for id, c := range t.records {
					if c.PodUID == string(pod.UID) {
						delete(t.records, id)
						delete(t.running, id)
					}
				}
				for k := range t.left {
					if k.pod == pod.UID {
						delete(t.left, k)
					}
				}
				t.mu.Unlock()
				if err := t.marks.forgetPod(string(pod.UID)); err != nil {
					t.log.Error(err, "sidecar terminator: stop marks left behind", "pod", pod.Namespace+"/"+pod.Name)
				}
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("sidecar terminator: watch pods: %w", err)
	}
	return t, nil
}

// Ready reports whether the terminator has its node's pods and has asked the runtime
// for exit events. A runtime that does not answer does not make it unready (the agent's
// other work goes on); it shows as warnings and in
// sextant_sidecar_event_stream_restarts_total.
func (t *Terminator) Ready() bool { return t.synced.Load() && t.following.Load() }

// LastAlive is when the terminator last showed it turns: its resync ticked, and a
// worker took the probe out of the queue. It stays old when every worker is blocked.
func (t *Terminator) LastAlive() time.Time { return t.beat.Last() }

// LivenessInterval is how often LastAlive moves while all is well.
func (t *Terminator) LivenessInterval() time.Duration { return t.cfg.Resync }

// Run works until ctx ends.
func (t *Terminator) Run(ctx context.Context) error {
	defer t.queue.ShutDown()
	// Waiting for the API server is not being stuck: beat meanwhile.
	for !t.informer.HasSynced() {
		t.beat.Mark(t.now())
		select {
		case <-ctx.Done():
			return errors.New("sidecar terminator: pod cache did not sync")
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.synced.Store(true)
	t.forgetGonePods()
	t.queue.Add(liveness.ProbeKey)
	var wg sync.WaitGroup
	for range t.cfg.Workers {
		wg.Go(func() {
			for t.processNext(ctx) {
			}
		})
	}
	wg.Go(func() { t.watchExits(ctx) })
	wg.Go(func() {
		tick := time.NewTicker(t.cfg.Resync)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				t.queue.Add(liveness.ProbeKey)
				t.enqueueAll()
			}
		}
	})
	<-ctx.Done()
	t.queue.ShutDown()
	wg.Wait()
	t.stops.Wait()
	return nil
}

func (t *Terminator) enqueuePod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !t.selector.Matches(labels.Set(pod.Labels)) {
		return
	}
	if _, ok := sidecarrules.PodRoles(pod); !ok {
		return
	}
	t.mu.Lock()
	settled := t.settled[pod.UID]
	t.mu.Unlock()
	if settled {
		return
	}
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		t.queue.Add(key)
	}
}

func (t *Terminator) enqueueAll() {
	for _, obj := range t.informer.GetStore().List() {
		t.enqueuePod(obj)
	}
	t.forgetOldExits()
}

// watchExits follows the runtime's exit events, subscribing again when the stream
// breaks. Each (re)subscription is followed by a full pass over the pods, since exits
// may have been missed meanwhile.
func (t *Terminator) watchExits(ctx context.Context) {
	backoff := time.Second
	for ctx.Err() == nil {
		t.newStream()
		events, errc := t.rt.TaskEvents(ctx)
		t.following.Store(true)
		t.enqueueAll()
		for e := range events {
			t.streamProven()
			switch {
			case e.Started:
				t.onStart(e)
			case e.Deleted:
				t.onDelete()
			default:
				t.onExit(ctx, e)
			}
			backoff = time.Second
		}
		err := <-errc
		t.following.Store(false)
		t.newStream()
		if ctx.Err() != nil {
			return
		}
		t.metrics.restarts.Inc()
		t.log.Error(err, "container exit events stopped; subscribing again", "after", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// newStream forgets the containers known running: the exits of the stream they were
// read under may be lost.
func (t *Terminator) newStream() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stream++
	t.streamLive.Store(false)
	clear(t.running)
}

// streamProven notes that the current subscription delivers events. containerd
// subscribes asynchronously, so before the first event an exit may not be sent. It runs
// for every event, hence no lock: only the event loop, which also calls newStream
// before each subscription, sets it.
func (t *Terminator) streamProven() {
	if !t.streamLive.Load() {
		t.streamLive.Store(true)
	}
}

// runningStatus asks the runtime for container id's state and keeps it when it runs and
// the exit stream was proven live before the question: its exit is then heard.
func (t *Terminator) runningStatus(ctx context.Context, id string) (cri.Container, error) {
	t.mu.Lock()
	stream, live := t.stream, t.streamLive.Load()
	t.mu.Unlock()
	st, err := t.rt.ContainerStatus(ctx, id)
	if err != nil || st.State != cri.StateRunning || !live {
		return st, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// An exit heard since the question, or a new stream, makes the answer stale.
	if _, exited := t.exits[id]; !exited && t.stream == stream {
		t.running[id] = st
	}
	return st, nil
}

// knownRunning is container id's state from running, unless the kubelet reports it
// terminated: that durable report overrides a kept state whatever the stream missed.
func (t *Terminator) knownRunning(id string, terminated map[string]bool) (cri.Container, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.running[id]
	if ok && terminated[id] {
		delete(t.running, id)
		return cri.Container{}, false
	}
	return st, ok
}

// onExit notes an exit and queues its pod. It runs in the one goroutine that reads the
// runtime's events, so a burst of exits waits on each call it makes: the pod is found
// from the kubelet's reports when they name the container, and only otherwise (a
// container that exited before the kubelet reported it) by asking the runtime.
func (t *Terminator) onExit(ctx context.Context, e cri.TaskEvent) {
	t.noteExit(heardExit{TaskEvent: e, heard: t.now()})
	if pod, ok := nodepods.ByContainerID(t.informer, e.ContainerID); ok {
		t.enqueuePod(pod)
		return
	}
	c, err := t.rt.ContainerStatus(ctx, e.ContainerID)
	if err != nil {
		return // a pod sandbox, or a container already removed: nothing of ours
	}
	pod, ok := nodepods.ByUID(t.informer, c.PodUID)
	if !ok {
		return // another node's pod cannot be here; a static pod
	}
	t.enqueuePod(pod)
}

// noteExit keeps an exit heard, from containerd or from the process. containerd's event,
// which has the exit code, replaces the process's report, but the exit counts as heard
// when it was first.
func (t *Terminator) noteExit(h heardExit) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := h.ContainerID
	if prev, ok := t.exits[id]; ok {
		if h.fromProcess {
			return // containerd's event came first, and has more to say
		}
		h.heard = minTime(h.heard, prev.heard)
	}
	t.exits[id] = h
	delete(t.running, id)
	delete(t.pids, id)
	delete(t.watching, id)
	if ch, ok := t.exited[id]; ok {
		close(ch)
		delete(t.exited, id)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// ProcessExited is Config.Exits' report that the process of container id ended at at: a
// main container of a Never pod, whose pod is looked at again straight away, or a sidecar
// the agent signalled.
func (t *Terminator) ProcessExited(id string, at time.Time) {
	t.mu.Lock()
	if _, ok := t.ended[id]; ok {
		// A signalled sidecar: only the time is news; the stop waits for containerd's
		// event, which has the exit code its Event reports.
		t.ended[id] = at
		t.mu.Unlock()
		return
	}
	key := t.watching[id]
	t.mu.Unlock()
	t.noteExit(heardExit{TaskEvent: cri.TaskEvent{ContainerID: id, ExitedAt: at}, heard: at, fromProcess: true})
	if key != "" {
		t.queue.Add(key)
	}
}

// onDelete wakes the stops waiting for the CRI to record a main container's exit.
func (t *Terminator) onDelete() {
	t.mu.Lock()
	close(t.reported)
	t.reported = make(chan struct{})
	t.mu.Unlock()
}

// onStart keeps a started container's PID, for a stop that signals the process itself
// and for watching a main container's process. Every container on the node starts here,
// but only until it exits: the map holds the running ones.
func (t *Terminator) onStart(e cri.TaskEvent) {
	if (t.cfg.Signaller == nil && t.cfg.Exits == nil) || e.Pid == 0 {
		return
	}
	t.mu.Lock()
	t.pids[e.ContainerID] = e.Pid
	t.mu.Unlock()
}

// forgetGonePods removes the stop marks of pods that are no longer on the node (deleted
// while no agent ran), once the pod cache has synced.
func (t *Terminator) forgetGonePods() {
	uids, err := t.marks.pods()
	if err != nil {
		t.log.Error(err, "sidecar terminator: stop marks of gone pods left behind")
		return
	}
	for _, uid := range uids {
		if _, ok := nodepods.ByUID(t.informer, uid); ok {
			continue
		}
		if err := t.marks.forgetPod(uid); err != nil {
			t.log.Error(err, "sidecar terminator: stop marks of a gone pod left behind", "uid", uid)
		}
	}
}

func (t *Terminator) forgetOldExits() {
	cutoff := t.now().Add(-exitMemory)
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, e := range t.exits {
		if e.ExitedAt.Before(cutoff) {
			delete(t.exits, id)
		}
	}
	for id, at := range t.recorded {
		if at.Before(cutoff) {
			delete(t.recorded, id)
		}
	}
	for id, at := range t.ended {
		if !at.IsZero() && at.Before(cutoff) {
			delete(t.ended, id) // its stop failed before recording it
		}
	}
}

func (t *Terminator) processNext(ctx context.Context) bool {
	key, quit := t.queue.Get()
	if quit {
		return false
	}
	defer t.queue.Done(key)
	if key == liveness.ProbeKey {
		t.beat.Mark(t.now())
		return true
	}
	if err := t.process(ctx, key, t.now()); err != nil {
		if ctx.Err() == nil {
			t.log.Error(err, "sidecar terminator: will look at the pod again", "pod", key)
		}
		t.queue.AddRateLimited(key)
		return true
	}
	t.queue.Forget(key)
	return true
}

// process looks at one pod, a pass a worker took up at taken: it finishes what an earlier
// run of the agent left half done, then stops the sidecars the rules say to stop.
func (t *Terminator) process(ctx context.Context, key string, taken time.Time) error {
	obj, exists, err := t.informer.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil
	}
	pod := obj.(*corev1.Pod)
	roles, ok := sidecarrules.PodRoles(pod)
	if !ok || pod.DeletionTimestamp != nil || !t.selector.Matches(labels.Set(pod.Labels)) {
		return nil // being deleted: the kubelet stops every container itself
	}
	ctrs, err := t.podContainers(ctx, pod, roles)
	if err != nil {
		return err
	}
	latest := latestAttempts(ctrs)
	states := map[string]sidecarrules.State{}
	for name, c := range latest {
		states[name] = stateOf(c)
	}
	if t.cfg.Exits != nil && pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
		t.watchMains(ctx, key, roles, latest)
	}

	// A failure to record (the API refusing an Event for now) holds up nothing else:
	// the other sidecars are still stopped, and the pod comes back for the record.
	var errs []error
	pending := false
	marks := map[string]stopMark{}
	for _, name := range roles.Sidecars {
		c, ok := latest[name]
		if !ok || c.StopMark == "" {
			continue
		}
		mark, err := parseStopMark(c.StopMark, c.ID)
		if err != nil {
			// Not a mark an agent wrote on this container: an image's label, or an older
			// agent's (see markVersion). The container is treated as unmarked.
			t.log.Info("ignoring a stop mark", "pod", key, "container", name, "id", c.ID, "reason", err.Error())
			continue
		}
		marks[name] = mark
		if t.stopping(c.ID) {
			pending = true // this process is on it
			continue
		}
		switch {
		case mark.Recorded:
		case c.State == cri.StateExited:
			// Stopped by an earlier run that did not live to record it.
			if err := t.record(ctx, pod, c, mark, stopTiming{mainFinished: lastMainFinished(roles, states)}); err != nil {
				errs = append(errs, err)
			}
		case c.State == cri.StateRunning:
			// An earlier run asked it to stop and died: see the stop through without
			// signalling the container again.
			pending = true
			t.startStop(ctx, pod, c, mark, true, stopTiming{mainFinished: lastMainFinished(roles, states)})
		}
	}

	d := sidecarrules.Decide(pod.Spec.RestartPolicy, roles, states)
	for _, name := range d.Stop {
		c := latest[name]
		if _, ok := marks[name]; ok {
			continue // handled above
		}
		if leftRunning(pod, name, ctrs, c) {
			if err := t.recordLeftRunning(ctx, pod, name); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		pending = true
		timing := t.heard(roles, latest, taken)
		timing.decided = t.now()
		mark := stopMark{ID: c.ID, Requested: timing.decided, Grace: roles.GracePeriod}
		timing.confirm = unreportedExits(pod, name, roles, latest)
		t.startStop(ctx, pod, c, mark, false, timing)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if !pending && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
		t.mu.Lock()
		t.settled[pod.UID] = true
		t.mu.Unlock()
	}
	return nil
}

// unreportedExits are the IDs of the main containers whose exits the CRI must report
// before sidecar is signalled: none for a regular sidecar, every main container the pod's
// status does not yet show terminated for a native one. The kubelet starts a native
// sidecar again when it sees it exited while a main container runs, and it sees both
// through the CRI, which records an exit well after containerd's event under a burst
// (docs/design/0076): the sidecar's exit must not be seen before its mains'.
func unreportedExits(pod *corev1.Pod, sidecar string, roles sidecarrules.Roles, latest map[string]cri.Container) []string {
	if !slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == sidecar }) {
		return nil
	}
	var out []string
	for _, m := range roles.Mains {
		c, ok := latest[m]
		if !ok {
			continue
		}
		if slices.ContainsFunc(pod.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool {
			return cs.State.Terminated != nil && runtimeID(cs.ContainerID) == c.ID
		}) {
			continue
		}
		out = append(out, c.ID)
	}
	return out
}

// Waiting for the CRI to record exits: how often it is asked at first and at most, and
// for how long before the stop fails and is retried.
const (
	reportPollFirst = 5 * time.Millisecond
	reportPollMax   = 200 * time.Millisecond
	reportDeadline  = 30 * time.Second
)

// awaitReportedExits returns once the CRI reports every container of ids exited (or
// gone). It asks again whenever containerd deletes a task, the step before the CRI's
// record, and otherwise at intervals growing to reportPollMax.
func (t *Terminator) awaitReportedExits(ctx context.Context, ids []string) error {
	deadline := t.now().Add(reportDeadline)
	wait := reportPollFirst
	for {
		t.mu.Lock()
		reported := t.reported
		t.mu.Unlock()
		var left []string
		for _, id := range ids {
			st, err := t.rt.ContainerStatus(ctx, id)
			if cri.IsNotFound(err) || (err == nil && st.State == cri.StateExited) {
				continue
			}
			if err != nil {
				return fmt.Errorf("await the runtime's record of main container %s: %w", id, err)
			}
			left = append(left, id)
		}
		if len(left) == 0 {
			return nil
		}
		ids = left
		if t.now().After(deadline) {
			return fmt.Errorf("the runtime has not recorded the exit of main container %s after %s", ids[0], reportDeadline)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-reported:
		case <-timer.C:
		}
		timer.Stop()
		wait = min(2*wait, reportPollMax)
	}
}

// watchMains has Config.Exits watch the processes of the running main containers.
func (t *Terminator) watchMains(ctx context.Context, key string, roles sidecarrules.Roles, latest map[string]cri.Container) {
	for _, m := range roles.Mains {
		c, ok := latest[m]
		if !ok || c.State != cri.StateRunning {
			continue
		}
		t.mu.Lock()
		pid := t.pids[c.ID]
		_, watching := t.watching[c.ID]
		if !watching {
			t.watching[c.ID] = key // one attempt per container: the exit event is the fallback
		}
		t.mu.Unlock()
		if watching {
			continue
		}
		if pid == 0 {
			var err error
			if pid, err = t.rt.TaskPID(ctx, c.ID); err != nil {
				t.log.V(1).Info("not watching a main container's process: its PID is unknown", "id", c.ID, "reason", err.Error())
				continue
			}
		}
		if err := t.cfg.Exits.Watch(pid, c.ID); err != nil {
			t.log.V(1).Info("not watching a main container's process", "id", c.ID, "pid", pid, "reason", err.Error())
		}
	}
}

// leftRunning reports whether the agent leaves running a sidecar the rules say to stop
// (cur, its latest attempt, of the pod's containers ctrs): a regular container that
// sextant-sidecar-wrapper does not run, in an OnFailure pod, that an agent stopped once
// already and that exited non-zero then, so the kubelet restarted it. Stopped again it
// would be restarted again, and the Job counts each restart against its backoffLimit: a
// Job whose main containers succeeded would end Failed. Many sidecars exit 0 on
// SIGTERM, so such a sidecar is stopped once, and left running only after that stop
// failed it. In a Never pod it is always stopped: its exit code fails the pod, as
// without sextant, but the Job is not left running for ever.
func leftRunning(pod *corev1.Pod, name string, ctrs []cri.Container, cur cri.Container) bool {
	if pod.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return false
	}
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 || sidecarrules.IsWrapped(&pod.Spec.Containers[i]) {
		return false // a native sidecar, whose exit code the kubelet does not count, or wrapped
	}
	return slices.ContainsFunc(ctrs, func(c cri.Container) bool {
		if c.Name != name || c.ID == cur.ID || c.Attempt >= cur.Attempt || c.State != cri.StateExited || c.ExitCode == 0 {
			return false
		}
		_, err := parseStopMark(c.StopMark, c.ID)
		return err == nil // an agent's stop, not a crash of its own
	})
}

// recordLeftRunning says, once per pod and container, that the sidecar is left running
// and what to do about it: a Warning Event, whose name is derived from the pod and the
// container so that a restarted agent creates it once, and the metric.
func (t *Terminator) recordLeftRunning(ctx context.Context, pod *corev1.Pod, container string) error {
	k := leftKey{pod.UID, container}
	t.mu.Lock()
	done := t.left[k]
	t.mu.Unlock()
	if done {
		return nil
	}
	msg := fmt.Sprintf("Sidecar container %s is left running: it is a regular container that sextant-sidecar-wrapper does not run, "+
		"stopped once it exited non-zero, and under restartPolicy OnFailure the kubelet restarts it and the Job counts "+
		"each restart against its backoffLimit. Let the webhook wrap it: in the pod template, give the container a command, "+
		"or name its image's ENTRYPOINT followed by its CMD (ENTRYPOINT alone when the container has args) in the annotation %s "+
		"(a JSON array), or let it be a native sidecar (drop %s: \"false\")",
		container, annotations.SidecarCommand(container), annotations.SidecarNative)
	ev := nodepods.NewPodEvent(t.source(), pod, nodepods.PodEvent{Type: corev1.EventTypeWarning, Reason: "SidecarNotStopped",
		Suffix: "sidecar-not-stopped." + container, Container: container, Message: msg}, t.now())
	if err := t.createEvent(ctx, ev); err != nil {
		return fmt.Errorf("record that %s is left running: %w", container, err)
	}
	t.mu.Lock()
	first := !t.left[k]
	t.left[k] = true
	t.mu.Unlock()
	if first {
		t.metrics.stops.WithLabelValues(resultSkipped).Inc()
		t.log.Info("left a sidecar running: stopped, it would be restarted", "pod", pod.Namespace+"/"+pod.Name, "container", container)
	}
	return nil
}

// podContainers reads the pod's main and sidecar containers: the runtime's records of
// them (which do not wait on the CRI's lock of any container's state; known ones from
// memory), the state of each from its exit event if the agent heard it and otherwise
// from the runtime, and the stop marks from the agent's state directory or, where an
// agent from before those files wrote one, the container's label.
func (t *Terminator) podContainers(ctx context.Context, pod *corev1.Pod, roles sidecarrules.Roles) ([]cri.Container, error) {
	recs, ok := t.knownRecords(pod, roles)
	if !ok {
		var err error
		if recs, err = t.rt.ContainerRecords(ctx, string(pod.UID)); err != nil {
			return nil, err
		}
		t.mu.Lock()
		for _, c := range recs {
			t.records[c.ID] = c
		}
		t.mu.Unlock()
	}
	terminated := terminatedIDs(pod)
	out := make([]cri.Container, 0, len(recs))
	for _, c := range recs {
		if !slices.Contains(roles.Mains, c.Name) && !slices.Contains(roles.Sidecars, c.Name) {
			// No rule reads any other container of the pod (the wrapper's installer, long
			// exited): asking for its state again, once its exit is forgotten, held up the
			// pass deciding a stop for as long as a busy containerd took to answer.
			continue
		}
		mark, err := t.marks.read(string(pod.UID), c.ID)
		if err != nil {
			return nil, err
		}
		if mark != "" {
			c.StopMark = mark
		}
		if exited, ok := t.heardExit(c); ok {
			out = append(out, exited)
			continue
		}
		st, known := t.knownRunning(c.ID, terminated)
		if !known {
			st, err = t.runningStatus(ctx, c.ID)
		}
		if cri.IsNotFound(err) {
			continue // made, or removed, between the two calls
		}
		if err != nil {
			return nil, err
		}
		c.State, c.StartedAt, c.FinishedAt, c.ExitCode, c.Attempt = st.State, st.StartedAt, st.FinishedAt, st.ExitCode, st.Attempt
		out = append(out, c)
	}
	return out, nil
}

// terminatedIDs are the runtime IDs of the pod's containers the kubelet reports
// terminated, the current attempts' and the last ones'.
func terminatedIDs(pod *corev1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if cs.State.Terminated != nil {
				if id := runtimeID(cs.ContainerID); id != "" {
					out[id] = true
				}
			}
			if last := cs.LastTerminationState.Terminated; last != nil {
				if id := runtimeID(last.ContainerID); id != "" {
					out[id] = true
				}
			}
		}
	}
	return out
}

// knownRecords are the records of the pod's containers without asking containerd, when
// the kubelet has reported a container for each of its mains and sidecars and the agent
// has read the records of every container the kubelet reports (the current and the last
// attempt of each). containerd's list reads every container of the node before it
// filters, which a burst of exits makes slow (docs/design/0074); it is needed only when
// a container the agent has not seen appears.
// A report that lags shows an older attempt as the newest, which only delays a stop: the
// pod's next status update brings the new one.
func (t *Terminator) knownRecords(pod *corev1.Pod, roles sidecarrules.Roles) ([]cri.Container, bool) {
	reported := map[string]string{} // container name → its current container's ID
	var ids []string
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if id := runtimeID(cs.ContainerID); id != "" {
				reported[cs.Name] = id
				ids = append(ids, id)
			}
			if last := cs.LastTerminationState.Terminated; last != nil {
				if id := runtimeID(last.ContainerID); id != "" {
					ids = append(ids, id)
				}
			}
		}
	}
	for _, name := range slices.Concat(roles.Mains, roles.Sidecars) {
		if reported[name] == "" {
			return nil, false
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]cri.Container, 0, len(ids))
	for _, id := range ids {
		c, ok := t.records[id]
		if !ok {
			return nil, false
		}
		out = append(out, c)
	}
	return out, true
}

// runtimeID is the container ID in a pod status's "<runtime>://<id>".
func runtimeID(statusID string) string {
	_, id, ok := strings.Cut(statusID, "://")
	if !ok {
		return ""
	}
	return id
}

// heardExit is c as it exited, if the agent heard its exit event.
func (t *Terminator) heardExit(c cri.Container) (cri.Container, bool) {
	t.mu.Lock()
	e, ok := t.exits[c.ID]
	t.mu.Unlock()
	if !ok {
		return c, false
	}
	c.State, c.ExitCode, c.FinishedAt = cri.StateExited, int32(e.ExitCode), e.ExitedAt
	return c, true
}

// latestAttempts picks the newest attempt of each container.
func latestAttempts(ctrs []cri.Container) map[string]cri.Container {
	out := map[string]cri.Container{}
	for _, c := range ctrs {
		if cur, ok := out[c.Name]; ok && (c.Attempt < cur.Attempt || (c.Attempt == cur.Attempt && !c.CreatedAt.After(cur.CreatedAt))) {
			continue
		}
		out[c.Name] = c
	}
	return out
}

func stateOf(c cri.Container) sidecarrules.State {
	switch c.State {
	case cri.StateRunning:
		return sidecarrules.State{Phase: sidecarrules.Running}
	case cri.StateExited:
		return sidecarrules.State{Phase: sidecarrules.Exited, ExitCode: c.ExitCode, FinishedAt: c.FinishedAt}
	}
	return sidecarrules.State{Phase: sidecarrules.Waiting}
}

// heard is the start of a stop's timing: when the last main container finished, and
// when the agent heard of it (its exit event, or the pass taken up at taken, whichever
// came first).
func (t *Terminator) heard(roles sidecarrules.Roles, latest map[string]cri.Container, taken time.Time) stopTiming {
	s := stopTiming{heard: taken, taken: taken}
	var last cri.Container
	for _, m := range roles.Mains {
		if c, ok := latest[m]; ok && c.State == cri.StateExited && c.FinishedAt.After(last.FinishedAt) {
			last = c
		}
	}
	s.mainFinished = last.FinishedAt
	t.mu.Lock()
	e, ok := t.exits[last.ID]
	t.mu.Unlock()
	if ok && e.heard.Before(s.heard) {
		s.heard = e.heard
	}
	return s
}

func lastMainFinished(roles sidecarrules.Roles, states map[string]sidecarrules.State) time.Time {
	var last time.Time
	for _, m := range roles.Mains {
		if s := states[m]; s.Phase == sidecarrules.Exited && s.FinishedAt.After(last) {
			last = s.FinishedAt
		}
	}
	return last
}

func (t *Terminator) stopping(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inflight[id]
}

// startStop stops one container in the background, unless this process already is.
func (t *Terminator) startStop(ctx context.Context, pod *corev1.Pod, c cri.Container, mark stopMark, adopted bool, timing stopTiming) {
	t.mu.Lock()
	if t.inflight[c.ID] {
		t.mu.Unlock()
		return
	}
	t.inflight[c.ID] = true
	t.mu.Unlock()
	t.stops.Go(func() {
		defer func() {
			t.mu.Lock()
			delete(t.inflight, c.ID)
			t.mu.Unlock()
		}()
		if err := t.stop(ctx, pod, c, mark, adopted, timing); err != nil && ctx.Err() == nil {
			t.metrics.stops.WithLabelValues(resultFailed).Inc()
			t.log.Error(err, "stopping a sidecar failed", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "id", c.ID)
			t.warn(ctx, pod, c.Name, err)
			if key, kerr := cache.MetaNamespaceKeyFunc(pod); kerr == nil {
				t.queue.AddRateLimited(key)
			}
		}
	})
}

func (t *Terminator) stop(ctx context.Context, pod *corev1.Pod, c cri.Container, mark stopMark, adopted bool, timing stopTiming) error {
	// Stopping may take the whole grace period (an adopted stop: what is left of the
	// first one, then a second); allow for it and a little more.
	sctx, cancel := context.WithTimeout(ctx, 2*mark.Grace+30*time.Second)
	defer cancel()
	var st cri.Container
	var err error
	if !adopted {
		if len(timing.confirm) > 0 {
			if err := t.awaitReportedExits(sctx, timing.confirm); err != nil {
				return err
			}
		}
		timing.confirmed = t.now()
		// The mark goes first: if the agent dies during the stop, the next one knows
		// the container was already told to stop.
		if err := t.marks.write(string(pod.UID), c.ID, mark.String()); err != nil {
			return err
		}
		timing.marked = t.now()
		if st, timing.via, err = t.stopContainer(sctx, c, mark.Grace); err != nil {
			return err
		}
		timing.stopped = t.now()
	} else {
		if err := t.finishStop(sctx, c.ID, mark); err != nil {
			return err
		}
		if st, err = t.exitedContainer(sctx, c); err != nil {
			return err
		}
	}
	return t.record(sctx, pod, st, mark, timing)
}

// How a stop signal reached the sidecar, on the stop's log line.
const (
	viaProcess = "process" // the agent signalled the process itself
	viaRuntime = "runtime" // the CRI's StopContainer
)

// exitPoll is how often a stop that signalled the process itself asks the runtime
// whether the container exited, in case the exit event is lost: the event is what it
// waits for.
const exitPoll = 5 * time.Second

// stopContainer stops c and returns it as it exited, and how it was signalled. The stop
// signal goes straight to its process where the Signaller can send it, and the runtime
// kills the container only if it outlives the grace period; otherwise the runtime's
// StopContainer does both. The runtime's way passes the signal through containerd and
// the container's shim to a new `runc kill` process, which under a burst of finishing
// Jobs was most of a stop's time (docs/design/0074).
func (t *Terminator) stopContainer(ctx context.Context, c cri.Container, grace time.Duration) (cri.Container, string, error) {
	if exited, release, ok := t.signalProcess(ctx, c); ok {
		defer release()
		st, done, err := t.awaitExit(ctx, c, exited, grace)
		if done || err != nil {
			return st, viaProcess, err
		}
		// It outlived its grace period: the runtime kills it.
		if err := t.rt.StopContainer(ctx, c.ID, 0); err != nil {
			return cri.Container{}, viaProcess, err
		}
		st, err = t.exitedContainer(ctx, c)
		return st, viaProcess, err
	}
	if err := t.rt.StopContainer(ctx, c.ID, grace); err != nil {
		return cri.Container{}, viaRuntime, err
	}
	st, err := t.exitedContainer(ctx, c)
	return st, viaRuntime, err
}

// awaitExit waits up to grace for signalled container c to exit (exited closed), and
// returns it as it exited; done is false once grace has passed.
func (t *Terminator) awaitExit(ctx context.Context, c cri.Container, exited <-chan struct{}, grace time.Duration) (st cri.Container, done bool, err error) {
	timer := time.NewTimer(grace)
	defer timer.Stop()
	poll := time.NewTicker(exitPoll)
	defer poll.Stop()
	for {
		select {
		case <-exited:
			st, err := t.exitedContainer(ctx, c)
			return st, true, err
		case <-poll.C:
			if st, err := t.rt.ContainerStatus(ctx, c.ID); err == nil && st.State == cri.StateExited {
				st.StopMark, st.StopSignal = c.StopMark, c.StopSignal
				return st, true, nil
			}
		case <-timer.C:
			return cri.Container{}, false, nil
		case <-ctx.Done():
			return cri.Container{}, false, ctx.Err()
		}
	}
}

// signalProcess sends c's stop signal to its process, if there is a Signaller and it can
// tell the process and the signal. exited is closed once the container's exit is heard;
// release forgets it.
func (t *Terminator) signalProcess(ctx context.Context, c cri.Container) (exited <-chan struct{}, release func(), ok bool) {
	if t.cfg.Signaller == nil {
		return nil, nil, false
	}
	sig, ok := procsignal.SignalNumber(c.StopSignal)
	if !ok {
		return nil, nil, false // unknown to the agent: the runtime knows it
	}
	t.mu.Lock()
	pid := t.pids[c.ID]
	t.mu.Unlock()
	if pid == 0 {
		var err error
		if pid, err = t.rt.TaskPID(ctx, c.ID); err != nil {
			t.log.V(1).Info("stopping a sidecar through the runtime: its PID is unknown", "id", c.ID, "reason", err.Error())
			return nil, nil, false
		}
	}
	t.watchEnd(pid, c.ID)
	ch, release := t.exitWaiter(c.ID)
	if err := t.cfg.Signaller.Signal(pid, c.ID, sig); err != nil {
		release()
		t.log.V(1).Info("stopping a sidecar through the runtime: its process could not be signalled", "id", c.ID, "pid", pid, "reason", err.Error())
		return nil, nil, false
	}
	return ch, release, true
}

// watchEnd has Config.Exits report when the process of sidecar id, about to be
// signalled, ends (ProcessExited). It is watched before the signal: once reaped, a
// process can no longer be watched.
func (t *Terminator) watchEnd(pid uint32, id string) {
	if t.cfg.Exits == nil {
		return
	}
	t.mu.Lock()
	_, watched := t.ended[id]
	if !watched {
		t.ended[id] = time.Time{}
	}
	t.mu.Unlock()
	if watched {
		return
	}
	if err := t.cfg.Exits.Watch(pid, id); err != nil {
		t.mu.Lock()
		delete(t.ended, id)
		t.mu.Unlock()
		t.log.V(1).Info("not watching a signalled sidecar's process", "id", id, "pid", pid, "reason", err.Error())
	}
}

// exitWaiter returns a channel closed once container id's exit is heard (at once if it
// was), and a function that forgets it.
func (t *Terminator) exitWaiter(id string) (<-chan struct{}, func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.exits[id]; ok {
		ch := make(chan struct{})
		close(ch)
		return ch, func() {}
	}
	ch, ok := t.exited[id]
	if !ok {
		ch = make(chan struct{})
		t.exited[id] = ch
	}
	return ch, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.exited[id] == ch {
			delete(t.exited, id)
		}
	}
}

// exitedContainer is c once it exited: as its exit event said, or else as the runtime
// says.
func (t *Terminator) exitedContainer(ctx context.Context, c cri.Container) (cri.Container, error) {
	if st, ok := t.heardExit(c); ok {
		return st, nil
	}
	st, err := t.rt.ContainerStatus(ctx, c.ID)
	if err != nil {
		return cri.Container{}, err
	}
	if st.State != cri.StateExited {
		return cri.Container{}, fmt.Errorf("container %s still %s after the stop", c.ID, st.State)
	}
	// Its exit event may still be on its way: until it comes, a pass over the pod must
	// not take the container for running from memory (a restarted attempt beside it
	// would look like a second sidecar to stop).
	t.mu.Lock()
	delete(t.running, c.ID)
	t.mu.Unlock()
	st.StopMark, st.StopSignal = c.StopMark, c.StopSignal
	return st, nil
}

// finishStop waits out the grace period an earlier agent gave the container, then, if
// it still runs, signals it and stops it through the CRI with the same grace period.
// The mark is written before the signal, so a container marked but running may never
// have been signalled (the agent died between the two, or the stop call failed):
// killing it outright would end it with 137, which fails a pod whose sidecar is a
// regular container. The SIGTERM goes out through containerd's task service first:
// containerd's CRI sends a container's stop signal once, and counts it sent when an
// earlier StopContainer, cut off by that agent's death, got no further than deciding to
// (then the CRI stop only waits out the grace and kills). A container that did get the
// first signal and ignored it gets SIGTERM then SIGKILL again: the same end, a grace
// period later.
func (t *Terminator) finishStop(ctx context.Context, id string, mark stopMark) error {
	deadline := mark.Requested.Add(mark.Grace)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for t.now().Before(deadline) {
		st, err := t.rt.ContainerStatus(ctx, id)
		if err != nil {
			return err
		}
		if st.State == cri.StateExited {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	if err := t.rt.Signal(ctx, id, syscall.SIGTERM); err != nil && !cri.IsNotFound(err) {
		// The CRI stop below still ends it, if with a kill.
		t.log.Error(err, "could not signal a sidecar an earlier agent began to stop", "id", id)
	}
	return t.rt.StopContainer(ctx, id, mark.Grace)
}

// record notes a finished stop: an Event on the pod, the metrics, and the mark that
// says it is recorded. The Event's name is derived from the container, so recording
// twice (an agent that died between the Event and the mark) creates it once.
func (t *Terminator) record(ctx context.Context, pod *corev1.Pod, c cri.Container, mark stopMark, timing stopTiming) (err error) {
	// A pass over the pod that read the mark before the stop's own record finished
	// would record it again: the runtime's mark is the memory across restarts, this
	// claim the memory within one process.
	t.mu.Lock()
	if _, claimed := t.recorded[c.ID]; claimed {
		t.mu.Unlock()
		return nil
	}
	t.recorded[c.ID] = t.now()
	t.mu.Unlock()
	defer func() {
		if err != nil {
			t.mu.Lock()
			delete(t.recorded, c.ID)
			t.mu.Unlock()
		}
	}()

	after, took := "after the last main container finished", time.Duration(-1)
	if lastMain := timing.mainFinished; !lastMain.IsZero() && !c.FinishedAt.IsZero() {
		took = max(c.FinishedAt.Sub(lastMain), 0)
		after = fmt.Sprintf("%s after the last main container finished", took.Round(time.Millisecond))
	}
	msg := fmt.Sprintf("Stopped sidecar container %s %s (exit code %d, grace period %s)", c.Name, after, c.ExitCode, mark.Grace)
	ev := nodepods.NewPodEvent(t.source(), pod, nodepods.PodEvent{Type: corev1.EventTypeNormal, Reason: "SidecarStopped",
		Suffix: stoppedSuffix(c.ID), Container: c.Name, Message: msg}, t.now())
	if err := t.createEvent(ctx, ev); err != nil {
		return fmt.Errorf("record the stop of %s: %w", c.Name, err)
	}
	mark.Recorded = true
	if err := t.marks.write(string(pod.UID), c.ID, mark.String()); err != nil {
		return err
	}
	timing.recorded = t.now()
	if took >= 0 {
		t.metrics.stopSeconds.Observe(took.Seconds())
	}
	timing.observe(t.metrics.phaseSeconds)
	kv := append([]any{"pod", pod.Namespace + "/" + pod.Name, "container", c.Name, "id", c.ID,
		"exitCode", c.ExitCode, "afterLastMain", took.String(), "signalled", timing.via}, timing.logValues()...)
	if d, ok := t.processEnded(c.ID, timing.heard); ok {
		t.metrics.processSeconds.Observe(d.Seconds())
		kv = append(kv, "processEndedMs", float64(d.Microseconds())/1000)
	}
	// The stop's count goes last: whoever sees it counted sees its durations too.
	t.metrics.stops.WithLabelValues(resultStopped).Inc()
	t.log.Info("stopped a sidecar", kv...)
	return nil
}

// processEnded is how long after heard the process of stopped sidecar id ended, as
// Config.Exits reported it; false when it was not watched or has not been reported.
func (t *Terminator) processEnded(id string, heard time.Time) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.ended[id]
	if !ok || at.IsZero() {
		return 0, false
	}
	delete(t.ended, id)
	if heard.IsZero() {
		return 0, false
	}
	return max(at.Sub(heard), 0), true
}

func (t *Terminator) warn(ctx context.Context, pod *corev1.Pod, container string, cause error) {
	ev := nodepods.NewPodEvent(t.source(), pod, nodepods.PodEvent{Type: corev1.EventTypeWarning, Reason: "SidecarStopFailed",
		Suffix: "sidecar-stop-failed", Repeatable: true, Container: container,
		Message: fmt.Sprintf("Stopping sidecar container %s failed: %v", container, cause)}, t.now())
	if err := t.createEvent(ctx, ev); err != nil {
		t.log.Error(err, "could not record an event", "pod", pod.Namespace+"/"+pod.Name)
	}
}

// createEvent creates ev within the API deadline: a worker that waited on a hung API
// server for ever would hold up every pod behind it.
func (t *Terminator) createEvent(ctx context.Context, ev *corev1.Event) error {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.APITimeout)
	defer cancel()
	return nodepods.CreateEvent(ctx, t.kube, t.cfg.NodeName, ev, t.log)
}

// source is the terminator as the recorder of its Events.
func (t *Terminator) source() nodepods.Source {
	return nodepods.Source{Node: t.cfg.NodeName, Component: t.cfg.Component, Controller: "sextant.io/sidecar-terminator"}
}

// stoppedSuffix names the Event that records the stop of one container: one per
// container, whichever agent process records it.
func stoppedSuffix(containerID string) string {
	id := containerID
	if len(id) > 12 {
		id = id[:12]
	}
	return "sidecar-stopped." + id
}
