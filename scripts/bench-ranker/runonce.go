package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

type binding struct {
	seq       int
	pod       int
	node      string
	at        time.Time
	numaNodes string
	hasNUMA   bool
}

// tracker follows the run's pods through an informer: bindings in the order the watch
// delivers them (which is etcd's commit order) and which pods the scheduler gave up on.
type tracker struct {
	mu            sync.Mutex
	prefix        string
	lastChange    time.Time
	bindings      []binding
	bound         map[int]bool
	unschedulable map[int]bool
}

func podIndex(prefix, name string) (int, bool) {
	s, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil
}

func (t *tracker) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	i, ok := podIndex(t.prefix, pod.Name)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Any change (a PreBind annotation, a condition) shows the scheduler is at work.
	t.lastChange = time.Now()
	if pod.Spec.NodeName != "" {
		if !t.bound[i] {
			t.bound[i] = true
			delete(t.unschedulable, i)
			v, has := pod.Annotations[annNUMANodes]
			t.bindings = append(t.bindings, binding{seq: len(t.bindings), pod: i, node: pod.Spec.NodeName,
				at: time.Now(), numaNodes: v, hasNUMA: has})
		}
		return
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			t.unschedulable[i] = true
		}
	}
}

func (t *tracker) idleSince() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastChange
}

func (t *tracker) snapshot() (bound, unschedulable int, first, last time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.bindings); n > 0 {
		first, last = t.bindings[0].at, t.bindings[n-1].at
	}
	return len(t.bindings), len(t.unschedulable), first, last
}

func (b *bench) runOnce(ctx context.Context, sched string) (res result, err error) {
	res = result{scheduler: sched, shape: b.shape.name, size: b.size, round: b.round, pods: len(b.workload)}
	logf("%s nodes, %s: refreshing heartbeats", b.label(), sched)
	if err := b.refreshHeartbeats(ctx); err != nil {
		return res, err
	}
	if err := b.waitServiceAccount(ctx); err != nil {
		return res, err
	}
	defer func() {
		// Between runs (and on failure) the pods go, so the next run starts from empty
		// nodes and nothing is left behind.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if derr := b.deletePods(cctx, sched); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	// A slow run outlasts the 2 minutes after which NUMAAware and DeviceAware count a
	// node's agent as gone and place without NUMA decisions, which would make the run
	// cheaper than it is. Live agents report every 30s, and so does the bench, for
	// either scheduler, until the run ends: deferred after the deletion of the pods, it
	// stops before they are deleted.
	rctx, stopRefresh := context.WithCancel(ctx)
	defer stopRefresh()
	go b.keepHeartbeatsFresh(rctx, sched)

	if b.shape.dra {
		if err := b.createClaims(ctx, sched); err != nil {
			return res, err
		}
	}
	var created atomic.Int64
	progress := startProgress(fmt.Sprintf("%s nodes, %s: creating pods", b.label(), sched), &created, len(b.workload))
	start := time.Now()
	err = b.parallel(ctx, len(b.workload), func(ctx context.Context, i int) error {
		if _, err := b.kube.CoreV1().Pods(b.ns).Create(ctx, b.pod(i, sched), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %d: %w", i, err)
		}
		created.Add(1)
		return nil
	})
	progress()
	if err != nil {
		return res, err
	}
	logf("%s nodes, %s: %d pods created in %s", b.label(), sched, len(b.workload), time.Since(start).Round(100*time.Millisecond))

	t := &tracker{prefix: sched, bound: map[int]bool{}, unschedulable: map[int]bool{}}
	ictx, stopInformer := context.WithCancel(ctx)
	defer stopInformer()
	factory := informers.NewSharedInformerFactoryWithOptions(b.kube, 0, informers.WithNamespace(b.ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = labelScheduler + "=" + sched
		}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.observe,
		UpdateFunc: func(_, obj any) { t.observe(obj) },
	}); err != nil {
		return res, fmt.Errorf("watch pods: %w", err)
	}
	factory.Start(ictx.Done())
	if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
		return res, fmt.Errorf("pod watch did not sync: %w", ctx.Err())
	}

	proc, note, err := b.startScheduler(ctx, sched)
	if err != nil {
		return res, err
	}
	defer proc.stop()
	res.note = note
	ready := proc.readyAt
	cpuAtReady, cpuErr := processCPU(proc.cmd.Process.Pid)
	// What listing the cluster cost, before any pod: the startup part of the peak.
	readyRSS := ""
	if rss, err := processPeakRSS(proc.cmd.Process.Pid); err == nil {
		readyRSS = fmt.Sprintf(", peak memory so far %d MiB", rss>>20)
	}
	logf("%s nodes, %s: scheduler ready%s; scheduling %d pods", b.label(), sched, readyRSS, len(b.workload))
	if b.o.cpuProfile > 0 {
		path := b.fileName("cpu-"+sched, "pprof")
		go func() {
			q := fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(b.o.cpuProfile.Seconds()))
			prof, err := b.getSecure(ctx, proc.port, q, b.o.cpuProfile+30*time.Second)
			if err == nil {
				err = os.WriteFile(path, []byte(prof), 0o644)
			}
			if err != nil {
				logf("%s nodes, %s: WARNING: no CPU profile: %v", b.label(), sched, err)
				return
			}
			logf("%s nodes, %s: CPU profile in %s", b.label(), sched, path)
		}()
	}

	deadline := time.Now().Add(b.o.timeout)
	var bound, unsched int
	var first, last time.Time
	for {
		bound, unsched, first, last = t.snapshot()
		now := time.Now()
		quiet := now.Sub(ready)
		if bound > 0 {
			quiet = now.Sub(last)
		}
		if bound == len(b.workload) {
			break
		}
		// Unschedulable-stable: everyone left was tried and refused, and nothing moved.
		if bound+unsched == len(b.workload) && quiet >= b.o.settle {
			break
		}
		// Some pods never reported a decision, and no pod changed for long: stuck. (Not
		// measured from the last binding: a loaded API server may take a minute to
		// complete the first PreBind writes and bindings.)
		idle := now.Sub(ready)
		if c := t.idleSince(); c.After(ready) {
			idle = now.Sub(c)
		}
		if idle >= max(4*b.o.settle, 2*time.Minute) {
			logf("%s nodes, %s: no pod changed for %s with %d pods undecided; stopping", b.label(), sched, idle.Round(time.Second), len(b.workload)-bound-unsched)
			res.note = strings.TrimSpace(res.note + fmt.Sprintf(" stalled: nothing changed for %s", idle.Round(time.Second)))
			break
		}
		if now.After(deadline) {
			logf("%s nodes, %s: timed out after %s", b.label(), sched, b.o.timeout)
			res.note = strings.TrimSpace(res.note + " timed out")
			break
		}
		if proc.exited() {
			return res, fmt.Errorf("scheduler exited during the run; see %s", proc.logPath)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if n, _, _, _ := t.snapshot(); n/500 != bound/500 {
			logf("%s nodes, %s: %d bound", b.label(), sched, n)
		}
	}
	if cpuErr == nil {
		var cpuAtEnd time.Duration
		if cpuAtEnd, cpuErr = processCPU(proc.cmd.Process.Pid); cpuErr == nil {
			res.cpu = cpuAtEnd - cpuAtReady
		}
	}
	if cpuErr != nil {
		logf("%s nodes, %s: WARNING: no CPU time: %v", b.label(), sched, cpuErr)
	}
	if rss, err := processPeakRSS(proc.cmd.Process.Pid); err != nil {
		logf("%s nodes, %s: WARNING: no peak memory: %v", b.label(), sched, err)
	} else {
		res.peakRSS = rss
	}
	// The live heap after the run, what the scheduler keeps per node and pod, is read
	// from the metrics below after a forced garbage collection (the heap profile's
	// gc=1): the last natural one may have run while pods were still queued. After the
	// CPU time is read: the collection costs CPU.
	prof, err := b.getSecure(ctx, proc.port, "/debug/pprof/heap?gc=1", time.Minute)
	if err != nil {
		logf("%s nodes, %s: WARNING: no forced garbage collection, the live heap is the last natural one's: %v", b.label(), sched, err)
	} else if b.o.cpuProfile > 0 {
		path := b.fileName("heap-"+sched, "pprof")
		if err := os.WriteFile(path, []byte(prof), 0o644); err != nil {
			logf("%s nodes, %s: WARNING: no heap profile: %v", b.label(), sched, err)
		} else {
			logf("%s nodes, %s: heap profile in %s", b.label(), sched, path)
		}
	}
	if text, err := b.scrapeMetrics(ctx, proc.port); err != nil {
		logf("%s nodes, %s: WARNING: no scheduler metrics: %v", b.label(), sched, err)
	} else {
		_ = os.WriteFile(b.fileName("metrics-"+sched, "txt"), []byte(text), 0o644)
		res.breakdown = summarizeMetrics(text, bound)
		res.liveHeap = liveHeapBytes(text)
		if sched == schedSextant && !strings.Contains(res.note, "PLUGINS MISSING") {
			res.pluginMeans = formatPluginMeans(text)
		}
		// A node the ranker took for silent got pods without NUMA decisions, which
		// costs it less than a decision: the run measured less than the workload.
		if n := undecidedPlacements(text, "silent_agent"); n > 0 {
			res.note = strings.TrimSpace(res.note + fmt.Sprintf(" SILENT-NODES(%.0f pods placed undecided)", n))
			logf("%s nodes, %s: WARNING: %.0f pods were placed without NUMA decisions on nodes the ranker took for silent (their NodeBandwidth older than 2 minutes): the heartbeat refresh fell behind",
				b.label(), sched, n)
		}
	}
	clockStart := ready
	if !first.IsZero() && first.Before(clockStart) {
		clockStart = first
	}
	res.bound, res.unscheduled = bound, len(b.workload)-bound
	if bound > 0 {
		res.elapsed = last.Sub(clockStart)
		if res.elapsed > 0 {
			res.podsPerSec = float64(bound) / res.elapsed.Seconds()
		}
		res.cpuPerPod = res.cpu / time.Duration(bound)
	}
	t.mu.Lock()
	bindings := append([]binding(nil), t.bindings...)
	t.mu.Unlock()
	b.analyse(&res, bindings, sched == schedSextant && !strings.Contains(res.note, "PLUGINS MISSING"))
	res.measured = true
	logf("%s nodes, %s: %d bound, %d unscheduled, %.1f pods/s", b.label(), sched, res.bound, res.unscheduled, res.podsPerSec)
	if ceiling := limiterCeiling(res.bound, b.o.schedulerQPS); ceiling > 0 && res.podsPerSec >= 0.97*ceiling {
		res.note = strings.TrimSpace(res.note + " AT-QPS-LIMIT")
		logf("%s nodes, %s: WARNING: %.1f pods/s is at its client rate limiter's ceiling (%.1f pods/s: one Binding per pod at --scheduler-qps %d after a burst of as many); this run measures the limiter, raise --scheduler-qps",
			b.label(), sched, res.podsPerSec, ceiling, b.o.schedulerQPS)
	}
	return res, nil
}

// limiterCeiling is the most pods/s a scheduler can bind when each bound pod costs one
// request of its client's token bucket (qps per second, burst qps, full at the start):
// the first qps Bindings pass at once, the rest at qps per second. 0 when the burst alone
// covers them. Events go through kube-scheduler's separate events client and do not count.
func limiterCeiling(bound, qps int) float64 {
	if qps <= 0 || bound <= qps {
		return 0
	}
	return float64(bound) / (float64(bound-qps) / float64(qps))
}
