package sidecar

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/agent/nodepods"
	"sextant.io/sextant/api/sidecarrules"
	"sextant.io/sextant/cri"
)

// fakeRuntime is a container runtime in memory. Stopping a container exits it with
// stopExit (default 0) after stopDelay, and sends the exit event.
type fakeRuntime struct {
	mu        sync.Mutex
	ctrs      map[string]*cri.Container
	stops     []string // IDs, one per StopContainer call
	timeouts  []time.Duration
	stopExit  int32
	stopDelay time.Duration
	exits     chan cri.TaskEvent
	pids      map[string]uint32 // what TaskPID answers
	// stateDir is the terminator's Config.StateDir, where mark reads its stop marks.
	stateDir string
	signals  []string // IDs, one per Signal call
	statuses []string // IDs, one per ContainerStatus call
	lists    int      // ContainerRecords calls
	// signalLost are containers whose stop signal containerd counts as sent by an
	// earlier, cut-off StopContainer: StopContainer then only kills them (137), unless
	// Signal reached them first.
	signalLost map[string]bool
	// unrecorded are containers whose exits the CRI has not yet recorded: ContainerStatus
	// reports them running after their exit events, until recordExit.
	unrecorded map[string]bool
	// onStatus, if set, runs after each ContainerStatus answer is made and before it
	// is returned.
	onStatus func(id string)
	// lateExits are containers whose exit events wait, after the runtime reports them
	// exited, until sendLateExit.
	lateExits map[string]*cri.TaskEvent
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{ctrs: map[string]*cri.Container{}, exits: make(chan cri.TaskEvent, 16), pids: map[string]uint32{}}
}

func (f *fakeRuntime) add(c cri.Container) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctrs[c.ID] = &c
}

// exit ends a container as its process would, and tells the event stream.
func (f *fakeRuntime) exit(id string, code int32, at time.Time) {
	f.mu.Lock()
	c := f.ctrs[id]
	c.State, c.ExitCode, c.FinishedAt = cri.StateExited, code, at
	e := cri.TaskEvent{ContainerID: id, ExitCode: uint32(code), ExitedAt: at}
	if _, late := f.lateExits[id]; late {
		f.lateExits[id] = &e
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	f.exits <- e
}

// sendLateExit sends the held exit event of container id.
func (f *fakeRuntime) sendLateExit(t *testing.T, id string) {
	t.Helper()
	f.mu.Lock()
	e := f.lateExits[id]
	delete(f.lateExits, id)
	f.mu.Unlock()
	if e == nil {
		t.Fatalf("no exit of %s held", id)
	}
	f.exits <- *e
}

// ContainerRecords answers as containerd's metadata store does: no state. A container's
// StopMark in the fake is its label, what an agent from before the mark files wrote.
func (f *fakeRuntime) ContainerRecords(_ context.Context, uid string) ([]cri.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var out []cri.Container
	for _, c := range f.ctrs {
		if c.PodUID == uid {
			rec := *c
			rec.State, rec.ExitCode, rec.StartedAt, rec.FinishedAt = cri.StateUnknown, 0, time.Time{}, time.Time{}
			out = append(out, rec)
		}
	}
	return out, nil
}

func (f *fakeRuntime) TaskPID(_ context.Context, id string) (uint32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if pid, ok := f.pids[id]; ok {
		return pid, nil
	}
	return 0, status.Error(codes.NotFound, "no such task")
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, id string) (cri.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock() // onStatus runs unlocked
	f.statuses = append(f.statuses, id)
	c, ok := f.ctrs[id]
	if !ok {
		return cri.Container{}, status.Error(codes.NotFound, "no such container")
	}
	out := *c
	out.StopMark, out.StopSignal = "", ""
	if f.unrecorded[id] {
		out.State, out.ExitCode, out.FinishedAt = cri.StateRunning, 0, time.Time{}
	}
	if hook := f.onStatus; hook != nil {
		f.mu.Unlock()
		hook(id)
		f.mu.Lock()
	}
	return out, nil
}

// statusCalls counts the ContainerStatus calls about container id.
func (f *fakeRuntime) statusCalls(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.statuses {
		if s == id {
			n++
		}
	}
	return n
}

// recordExit has the CRI record container id's exit, as containerd's CRI does after it
// deleted the task.
func (f *fakeRuntime) recordExit(id string) {
	f.mu.Lock()
	delete(f.unrecorded, id)
	f.mu.Unlock()
	f.exits <- cri.TaskEvent{ContainerID: id, Deleted: true}
}

func (f *fakeRuntime) StopContainer(_ context.Context, id string, timeout time.Duration) error {
	f.mu.Lock()
	f.stops = append(f.stops, id)
	f.timeouts = append(f.timeouts, timeout)
	c, ok := f.ctrs[id]
	if !ok {
		f.mu.Unlock()
		return status.Error(codes.NotFound, "no such container")
	}
	running := c.State == cri.StateRunning
	code := f.stopExit
	if f.signalLost[id] && !slices.Contains(f.signals, id) {
		code = 137
	}
	f.mu.Unlock()
	if running {
		time.Sleep(f.stopDelay)
		f.exit(id, code, time.Now())
	}
	return nil
}

func (f *fakeRuntime) Signal(_ context.Context, id string, sig syscall.Signal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.ctrs[id]; !ok {
		return status.Error(codes.NotFound, "no such container")
	}
	if sig == syscall.SIGTERM {
		f.signals = append(f.signals, id)
	}
	return nil
}

func (f *fakeRuntime) TaskEvents(ctx context.Context) (<-chan cri.TaskEvent, <-chan error) {
	out := make(chan cri.TaskEvent)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				errc <- nil
				return
			case e := <-f.exits:
				select {
				case out <- e:
				case <-ctx.Done():
					errc <- nil
					return
				}
			}
		}
	}()
	return out, errc
}

func (f *fakeRuntime) stopCalls() ([]string, []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.stops...), append([]time.Duration(nil), f.timeouts...)
}

// mark is container id's stop mark: the terminator's file, else its label.
func (f *fakeRuntime) mark(id string) string {
	f.mu.Lock()
	c, dir := *f.ctrs[id], f.stateDir
	f.mu.Unlock()
	if b, err := os.ReadFile(filepath.Join(dir, "sidecar-stops", c.PodUID, id)); err == nil {
		return string(b)
	}
	return c.StopMark
}

const node = "node-1"

func jobPod(name string, uid types.UID, policy corev1.RestartPolicy) *corev1.Pod {
	sidecarEnv := []corev1.EnvVar{{Name: sidecarrules.EnvSidecar, Value: "true"}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: uid},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: policy, TerminationGracePeriodSeconds: ptr.To[int64](5),
			InitContainers: []corev1.Container{{Name: "proxy", Env: sidecarEnv,
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
			Containers: []corev1.Container{{Name: "main"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

type harness struct {
	term    *Terminator
	rt      *fakeRuntime
	kube    *fake.Clientset
	reg     *prometheus.Registry
	metrics *Metrics
	cancel  context.CancelFunc
	done    chan struct{}
}

func start(t *testing.T, rt *fakeRuntime, pods ...*corev1.Pod) *harness {
	t.Helper()
	return startWith(t, setup{}, rt, pods...)
}

// setup is what a test changes about the terminator startWith runs.
type setup struct {
	// cfg is the terminator's Config; NodeName and a Resync far beyond the test are
	// filled in.
	cfg Config
	// kube is the API the pods are created in; nil: a new fake clientset.
	kube *fake.Clientset
	// client, if set, is what the terminator talks to instead of kube directly.
	client func(kubernetes.Interface) kubernetes.Interface
}

func startWith(t *testing.T, s setup, rt *fakeRuntime, pods ...*corev1.Pod) *harness {
	t.Helper()
	if s.kube == nil {
		s.kube = fake.NewClientset()
	}
	h := &harness{rt: rt, kube: s.kube, reg: prometheus.NewRegistry(), done: make(chan struct{})}
	for _, p := range pods {
		if _, err := h.kube.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.metrics = NewMetrics(h.reg)
	// A resync far beyond the test: stops must come from events and pod updates.
	informer := nodepods.NewInformer(h.kube, node)
	cfg := s.cfg
	cfg.NodeName, cfg.Resync = node, time.Hour
	// A terminator started again over the same runtime is the agent restarted: the
	// state directory outlives it.
	rt.mu.Lock()
	if cfg.StateDir == "" {
		cfg.StateDir = rt.stateDir
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	rt.stateDir = cfg.StateDir
	rt.mu.Unlock()
	var client kubernetes.Interface = h.kube
	if s.client != nil {
		client = s.client(h.kube)
	}
	term, err := New(cfg, client, informer, rt, h.metrics, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.term = term
	go informer.Run(ctx.Done())
	go func() { defer close(h.done); _ = term.Run(ctx) }()
	t.Cleanup(h.stop)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return term.Ready(), nil
	}); err != nil {
		t.Fatal("terminator never became ready")
	}
	return h
}

func (h *harness) stop() {
	h.cancel()
	<-h.done
}

func (h *harness) events(t *testing.T) []corev1.Event {
	t.Helper()
	list, err := h.kube.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// waitRecorded waits for container id's mark to say its stop is recorded, and names
// the pod's Events and the mark it last read if it never does.
func (h *harness) waitRecorded(t *testing.T, id string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return strings.HasSuffix(h.rt.mark(id), ":recorded"), nil }); err != nil {
		var seen []string
		for _, ev := range h.events(t) {
			seen = append(seen, ev.Reason+": "+ev.Message)
		}
		t.Fatalf("timed out waiting for the recorded mark of %s: mark %q, Events %q", id, h.rt.mark(id), seen)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestStopsSidecarOnMainExit(t *testing.T) {
	rt := newFakeRuntime()
	rt.stopDelay = 20 * time.Millisecond
	pod := jobPod("job-a", "uid-a", corev1.RestartPolicyNever)
	now := time.Now()
	rt.add(cri.Container{ID: "main-a", PodUID: "uid-a", Name: "main", State: cri.StateRunning, CreatedAt: now})
	rt.add(cri.Container{ID: "proxy-a", PodUID: "uid-a", Name: "proxy", State: cri.StateRunning, CreatedAt: now})
	// Another pod's container of the same name, also running: never to be touched.
	other := jobPod("job-b", "uid-b", corev1.RestartPolicyNever)
	rt.add(cri.Container{ID: "main-b", PodUID: "uid-b", Name: "main", State: cri.StateRunning, CreatedAt: now})
	rt.add(cri.Container{ID: "proxy-b", PodUID: "uid-b", Name: "proxy", State: cri.StateRunning, CreatedAt: now})
	h := start(t, rt, pod, other)

	time.Sleep(50 * time.Millisecond)
	if ids, _ := rt.stopCalls(); len(ids) != 0 {
		t.Fatalf("stopped %v while every main container runs", ids)
	}
	rt.exit("main-a", 0, time.Now())
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })

	ids, timeouts := rt.stopCalls()
	if len(ids) != 1 || ids[0] != "proxy-a" || timeouts[0] != 5*time.Second {
		t.Errorf("StopContainer calls = %v with %v; want proxy-a once, with the pod's 5s grace period", ids, timeouts)
	}
	ev := h.events(t)[0]
	if ev.Reason != "SidecarStopped" || ev.InvolvedObject.UID != "uid-a" || ev.InvolvedObject.FieldPath != "spec.initContainers{proxy}" {
		t.Errorf("event = %s on %s %s, want SidecarStopped on uid-a spec.initContainers{proxy}", ev.Reason, ev.InvolvedObject.UID, ev.InvolvedObject.FieldPath)
	}
	if !strings.Contains(ev.Message, "proxy") || !strings.Contains(ev.Message, "exit code 0") {
		t.Errorf("event message %q does not say which container and how it ended", ev.Message)
	}
	h.waitRecorded(t, "proxy-a")
	// The stop is counted after its mark is written.
	waitFor(t, "sextant_sidecar_stops_total{result=stopped} to reach 1", func() bool {
		return testutil.ToFloat64(h.metrics.stops.WithLabelValues(resultStopped)) == 1
	})
	if n := testutil.CollectAndCount(h.metrics.stopSeconds); n != 1 {
		t.Errorf("sextant_sidecar_stop_seconds has %d series, want 1", n)
	}
	hist := histogramOf(t, h.reg, "sextant_sidecar_stop_seconds")
	// A lower bound only: how long the queue and the goroutines take is the machine's.
	if hist.GetSampleCount() != 1 || hist.GetSampleSum() < 0.02 {
		t.Errorf("stop_seconds: %d samples summing to %vs; want one of at least the 20ms the stop took", hist.GetSampleCount(), hist.GetSampleSum())
	}

	// Each phase once, and the stop's own phase at least the 20ms the runtime took.
	if got := phaseSamples(t, h.reg, phaseStopped); got.count != 1 || got.sum < 0.02 {
		t.Errorf("phase stopped: %d samples summing to %vs; want one of at least 20ms", got.count, got.sum)
	}
	var phaseSum float64
	for _, p := range phases {
		got := phaseSamples(t, h.reg, p)
		if got.count != 1 {
			t.Errorf("phase %s: %d samples, want 1", p, got.count)
		}
		phaseSum += got.sum
	}
	// The phases follow one another from the main's exit to the record, so together
	// they are at least the stop's total.
	if phaseSum < hist.GetSampleSum() {
		t.Errorf("phases sum to %vs, less than the stop's %vs", phaseSum, hist.GetSampleSum())
	}

	// The other pod's main exits 3: with Never, its sidecar is stopped too, and only then.
	rt.exit("main-b", 3, time.Now())
	waitFor(t, "the second stop", func() bool { return len(h.events(t)) == 2 })
	ids, _ = rt.stopCalls()
	if len(ids) != 2 || ids[1] != "proxy-b" {
		t.Errorf("StopContainer calls = %v, want proxy-a then proxy-b", ids)
	}
}

// TestExitOfReportedContainerNeedsNoRuntimeCall: an exit of a container the kubelet has
// reported in the pod's status finds its pod without asking the runtime: in a burst,
// every such call would hold up the exits behind it. Nor does the pass that stops the
// sidecar ask about the container whose exit it heard: the CRI holds that container's
// state while it writes the exit.
func TestExitOfReportedContainerNeedsNoRuntimeCall(t *testing.T) {
	rt := newFakeRuntime()
	// A regular sidecar: a native one waits for the CRI's record of the exit
	// (TestNativeSidecarWaitsForTheRuntimesRecord).
	pod := regularSidecarPod("job-a", "uid-a", corev1.RestartPolicyNever, nil)
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://main-a"}}
	now := time.Now()
	rt.add(cri.Container{ID: "main-a", PodUID: "uid-a", Name: "main", State: cri.StateRunning, CreatedAt: now})
	rt.add(cri.Container{ID: "proxy-a", PodUID: "uid-a", Name: "proxy", State: cri.StateRunning, CreatedAt: now})
	h := start(t, rt, pod)
	// The first pass over the running pod asks about both containers.
	waitFor(t, "the first pass", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return slices.Contains(rt.statuses, "main-a") && slices.Contains(rt.statuses, "proxy-a")
	})
	rt.mu.Lock()
	before := len(rt.statuses)
	rt.mu.Unlock()
	rt.exit("main-a", 0, time.Now())
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if after := rt.statuses[before:]; slices.Contains(after, "main-a") {
		t.Errorf("ContainerStatus calls after the exit %v: the runtime was asked about main-a, whose exit was heard", after)
	}
}

// TestLongPodNameEventIsValid: the Event recording a stop is named after the pod; a
// 253-character pod name is cut to make room for the rest, and the cut must not leave a
// name ending in '-' or '.' before the next part, which the API server refuses.
func TestLongPodNameEventIsValid(t *testing.T) {
	for _, name := range []string{
		"a" + strings.Repeat("-", 251) + "a",
		strings.Repeat("a.", 126) + "a",
	} {
		t.Run(name[:4], func(t *testing.T) {
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) != 253 {
				t.Fatalf("%.20s… (%d characters) is no valid pod name of the longest: %v", name, len(name), errs)
			}
			rt := newFakeRuntime()
			now := time.Now()
			rt.add(cri.Container{ID: "main-0123456789abcdef", PodUID: "uid-long-name", Name: "main", State: cri.StateRunning, CreatedAt: now})
			rt.add(cri.Container{ID: "proxy-0123456789abcdef", PodUID: "uid-long-name", Name: "proxy", State: cri.StateRunning, CreatedAt: now})
			h := start(t, rt, jobPod(name, "uid-long-name", corev1.RestartPolicyNever))
			rt.exit("main-0123456789abcdef", 0, time.Now())
			waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
			ev := h.events(t)[0]
			if ev.Reason != "SidecarStopped" {
				t.Fatalf("event %s, want SidecarStopped", ev.Reason)
			}
			if errs := validation.IsDNS1123Subdomain(ev.Name); len(errs) > 0 {
				t.Errorf("the stop's event is named %q, which the API server refuses: %v", ev.Name, errs)
			}
		})
	}
}

func TestOnFailureWaitsForSuccess(t *testing.T) {
	rt := newFakeRuntime()
	pod := jobPod("job", "uid", corev1.RestartPolicyOnFailure)
	t0 := time.Now()
	rt.add(cri.Container{ID: "main-0", PodUID: "uid", Name: "main", Attempt: 0, State: cri.StateRunning, CreatedAt: t0})
	rt.add(cri.Container{ID: "proxy", PodUID: "uid", Name: "proxy", State: cri.StateRunning, CreatedAt: t0})
	h := start(t, rt, pod)

	rt.exit("main-0", 1, time.Now())
	time.Sleep(100 * time.Millisecond)
	if ids, _ := rt.stopCalls(); len(ids) != 0 {
		t.Fatalf("stopped %v after a failure the kubelet will retry", ids)
	}
	// The kubelet restarts the main container; attempt 1 succeeds.
	rt.add(cri.Container{ID: "main-1", PodUID: "uid", Name: "main", Attempt: 1, State: cri.StateRunning, CreatedAt: time.Now()})
	rt.exit("main-1", 0, time.Now())
	waitFor(t, "the stop after the success", func() bool { return len(h.events(t)) == 1 })
	if ids, _ := rt.stopCalls(); len(ids) != 1 || ids[0] != "proxy" {
		t.Errorf("StopContainer calls = %v, want proxy once", ids)
	}
}

func TestAlwaysAndUnmarkedPodsUntouched(t *testing.T) {
	rt := newFakeRuntime()
	always := jobPod("always", "uid-always", corev1.RestartPolicyAlways)
	plain := jobPod("plain", "uid-plain", corev1.RestartPolicyNever)
	plain.Spec.InitContainers[0].Env = nil
	now := time.Now()
	for _, uid := range []string{"uid-always", "uid-plain"} {
		rt.add(cri.Container{ID: "main-" + uid, PodUID: uid, Name: "main", State: cri.StateRunning, CreatedAt: now})
		rt.add(cri.Container{ID: "proxy-" + uid, PodUID: uid, Name: "proxy", State: cri.StateRunning, CreatedAt: now})
	}
	h := start(t, rt, always, plain)
	rt.exit("main-uid-always", 0, time.Now())
	rt.exit("main-uid-plain", 0, time.Now())
	time.Sleep(200 * time.Millisecond)
	if ids, _ := rt.stopCalls(); len(ids) != 0 {
		t.Errorf("stopped %v", ids)
	}
	if evs := h.events(t); len(evs) != 0 {
		t.Errorf("recorded %d events", len(evs))
	}
}

// An agent that died after marking and signalling the sidecar: the new one does not
// signal it again; it waits for the exit and records it once.
func TestRestartAdoptsStopInProgress(t *testing.T) {
	rt := newFakeRuntime()
	pod := jobPod("job", "uid", corev1.RestartPolicyNever)
	finished := time.Now().Add(-time.Second)
	rt.add(cri.Container{ID: "main", PodUID: "uid", Name: "main", State: cri.StateExited, FinishedAt: finished})
	rt.add(cri.Container{ID: "proxy", PodUID: "uid", Name: "proxy", State: cri.StateRunning,
		StopMark: markFor("proxy", stopMark{Requested: time.Now(), Grace: 30 * time.Second})})
	h := start(t, rt, pod)

	time.Sleep(200 * time.Millisecond)
	if ids, _ := rt.stopCalls(); len(ids) != 0 {
		t.Fatalf("signalled %v again although an earlier agent already had", ids)
	}
	rt.exit("proxy", 0, time.Now()) // the SIGTERM the earlier agent sent takes effect
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
	if ids, _ := rt.stopCalls(); len(ids) != 0 {
		t.Errorf("StopContainer calls = %v, want none", ids)
	}
}

// finishOverdueStop starts an agent on a Never Job pod whose main container exited a
// minute ago and whose sidecar still runs under an earlier agent's stop mark, 40 s old
// with a 30 s grace period, and waits for the stop to be recorded.
func finishOverdueStop(t *testing.T, rt *fakeRuntime) {
	t.Helper()
	pod := jobPod("job", "uid", corev1.RestartPolicyNever)
	rt.add(cri.Container{ID: "main", PodUID: "uid", Name: "main", State: cri.StateExited, FinishedAt: time.Now().Add(-time.Minute)})
	rt.add(cri.Container{ID: "proxy", PodUID: "uid", Name: "proxy", State: cri.StateRunning,
		StopMark: markFor("proxy", stopMark{Requested: time.Now().Add(-40 * time.Second), Grace: 30 * time.Second})})
	h := start(t, rt, pod)
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
}

// An earlier agent's stop whose grace period is over and whose container still runs
// (the agent died before its SIGKILL): the new one kills it, once.
func TestRestartFinishesOverdueStop(t *testing.T) {
	rt := newFakeRuntime()
	finishOverdueStop(t, rt)
	ids, timeouts := rt.stopCalls()
	// The earlier agent may have died before its signal went out: the overdue stop is
	// a real one (SIGTERM first, with the pod's grace), not a bare kill.
	if len(ids) != 1 || ids[0] != "proxy" || timeouts[0] != 30*time.Second {
		t.Errorf("StopContainer calls = %v with %v, want proxy once with the 30s grace period", ids, timeouts)
	}
}

// The earlier agent died inside its StopContainer call, after containerd's CRI had
// counted the stop signal as sent but before it went out: another StopContainer then
// sends no signal and only kills, after the grace period. The new agent signals the
// sidecar itself, which exits 0 instead of 137 (which fails a Never pod).
func TestRestartSignalsWhatContainerdCountsAsSignalled(t *testing.T) {
	rt := newFakeRuntime()
	rt.signalLost = map[string]bool{"proxy": true}
	finishOverdueStop(t, rt)
	rt.mu.Lock()
	signals, code := slices.Clone(rt.signals), rt.ctrs["proxy"].ExitCode
	rt.mu.Unlock()
	if len(signals) != 1 || signals[0] != "proxy" || code != 0 {
		t.Errorf("SIGTERM sent to %v, sidecar exited %d; want proxy signalled once, exit 0", signals, code)
	}
}

// An earlier agent stopped the sidecar but died before recording it: the new one
// records it and does not touch the exited container.
func TestRestartRecordsUnrecordedStop(t *testing.T) {
	rt := newFakeRuntime()
	pod := jobPod("job", "uid", corev1.RestartPolicyNever)
	done := time.Now().Add(-time.Second)
	rt.add(cri.Container{ID: "main", PodUID: "uid", Name: "main", State: cri.StateExited, FinishedAt: done.Add(-300 * time.Millisecond)})
	rt.add(cri.Container{ID: "proxy", PodUID: "uid", Name: "proxy", State: cri.StateExited, FinishedAt: done,
		StopMark: markFor("proxy", stopMark{Requested: done.Add(-200 * time.Millisecond), Grace: 30 * time.Second})})
	// A Recorded mark is done: nothing more.
	second := jobPod("job2", "uid2", corev1.RestartPolicyNever)
	rt.add(cri.Container{ID: "main2", PodUID: "uid2", Name: "main", State: cri.StateExited, FinishedAt: done})
	rt.add(cri.Container{ID: "proxy2", PodUID: "uid2", Name: "proxy", State: cri.StateExited, FinishedAt: done,
		StopMark: markFor("proxy2", stopMark{Requested: done, Grace: 30 * time.Second, Recorded: true})})
	h := start(t, rt, pod, second)
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
	time.Sleep(100 * time.Millisecond)
	if evs := h.events(t); len(evs) != 1 || evs[0].InvolvedObject.UID != "uid" {
		t.Errorf("events = %d, want one, for the unrecorded stop", len(evs))
	}
	if ids, _ := rt.stopCalls(); len(ids) != 0 {
		t.Errorf("StopContainer calls = %v, want none", ids)
	}
	// The mark is written after the Event.
	waitFor(t, "the stop's mark recorded", func() bool { return strings.HasSuffix(rt.mark("proxy"), ":recorded") })
	// The latency is observed after the mark is written.
	waitFor(t, "the stop's latency observed", func() bool {
		return histogramOf(t, h.reg, "sextant_sidecar_stop_seconds").GetSampleCount() >= 1
	})
	hist := histogramOf(t, h.reg, "sextant_sidecar_stop_seconds")
	if hist.GetSampleCount() != 1 || fmt.Sprintf("%.1f", hist.GetSampleSum()) != "0.3" {
		t.Errorf("stop_seconds: %d samples summing to %vs; want one of 0.3s (sidecar finish - main finish)", hist.GetSampleCount(), hist.GetSampleSum())
	}
}

func histogramOf(t *testing.T, reg *prometheus.Registry, name string) interface {
	GetSampleCount() uint64
	GetSampleSum() float64
} {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no histogram %s", name)
	return nil
}

// phaseSamples is the count and sum of sextant_sidecar_stop_phase_seconds{phase}.
func phaseSamples(t *testing.T, reg *prometheus.Registry, phase string) (got struct {
	count uint64
	sum   float64
}) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sextant_sidecar_stop_phase_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" && l.GetValue() == phase {
					got.count, got.sum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return got
}

// markFor is the mark an agent writes on container id.
func markFor(id string, m stopMark) string {
	m.ID = id
	return m.String()
}

// regularSidecarPod is jobPod with its sidecar a regular container running command.
func regularSidecarPod(name string, uid types.UID, policy corev1.RestartPolicy, command []string) *corev1.Pod {
	pod := jobPod(name, uid, policy)
	proxy := pod.Spec.InitContainers[0]
	proxy.RestartPolicy, proxy.Command = nil, command
	pod.Spec.InitContainers = nil
	pod.Spec.Containers = append(pod.Spec.Containers, proxy)
	return pod
}

// A regular sidecar the wrapper does not run exits 143 when stopped: under OnFailure
// the kubelet restarts it, the agent would stop it again, and the Job counts every
// restart against its backoffLimit. The agent leaves it running and says so, once.
func TestUnwrappedRegularSidecarUnderOnFailure(t *testing.T) {
	const wrapper = sidecarrules.WrapperPath
	cases := []struct {
		name    string
		policy  corev1.RestartPolicy
		native  bool
		command []string
		// exit is what the sidecar ends with when stopped; restarted, the kubelet
		// starts it again (OnFailure and non-zero).
		exit      int32
		restarted bool
	}{
		{"onfailure, regular, image entrypoint", corev1.RestartPolicyOnFailure, false, nil, 143, true},
		{"onfailure, regular, own command", corev1.RestartPolicyOnFailure, false, []string{"/bin/proxy", wrapper}, 143, true},
		{"onfailure, regular, exits 0 on SIGTERM", corev1.RestartPolicyOnFailure, false, nil, 0, false},
		{"onfailure, regular, wrapped", corev1.RestartPolicyOnFailure, false, []string{wrapper}, 0, false},
		{"onfailure, native, unwrapped", corev1.RestartPolicyOnFailure, true, nil, 143, false},
		{"never, regular, unwrapped", corev1.RestartPolicyNever, false, nil, 143, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rt := newFakeRuntime()
			rt.stopExit = c.exit
			pod := jobPod("job", "uid", c.policy)
			if !c.native {
				pod = regularSidecarPod("job", "uid", c.policy, c.command)
			}
			now := time.Now()
			rt.add(cri.Container{ID: "main", PodUID: "uid", Name: "main", State: cri.StateRunning, CreatedAt: now})
			rt.add(cri.Container{ID: "proxy", PodUID: "uid", Name: "proxy", State: cri.StateRunning, CreatedAt: now})
			h := start(t, rt, pod)
			rt.exit("main", 0, time.Now())

			// Every such sidecar is stopped once.
			waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
			if ids, _ := rt.stopCalls(); len(ids) != 1 || ids[0] != "proxy" {
				t.Errorf("StopContainer calls = %v, want proxy once", ids)
			}
			if ev := h.events(t)[0]; ev.Reason != "SidecarStopped" {
				t.Errorf("event %s: %s, want SidecarStopped", ev.Reason, ev.Message)
			}
			if !c.restarted {
				return
			}
			// The kubelet restarts it: the new attempt is left running, with a warning.
			rt.add(cri.Container{ID: "proxy-1", PodUID: "uid", Name: "proxy", Attempt: 1, State: cri.StateRunning, CreatedAt: time.Now()})
			pod.Labels = map[string]string{"restarted": "1"}
			if _, err := h.kube.CoreV1().Pods("ns").Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the warning", func() bool { return len(h.events(t)) == 2 })
			var ev corev1.Event
			for _, e := range h.events(t) {
				if e.Reason != "SidecarStopped" {
					ev = e
				}
			}
			if ev.Reason != "SidecarNotStopped" || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.FieldPath != "spec.containers{proxy}" {
				t.Errorf("event = %s %s on %s, want a SidecarNotStopped Warning on spec.containers{proxy}", ev.Type, ev.Reason, ev.InvolvedObject.FieldPath)
			}
			for _, want := range []string{"proxy", "OnFailure", "command", "sidecar.sextant.io/command-proxy", "native"} {
				if !strings.Contains(ev.Message, want) {
					t.Errorf("event message %q does not mention %q", ev.Message, want)
				}
			}
			waitFor(t, `sextant_sidecar_stops_total{result="skipped"} to reach 1`, func() bool {
				return testutil.ToFloat64(h.metrics.stops.WithLabelValues(resultSkipped)) == 1
			})
			// Another look at the pod (its status changed) asks the API for nothing more.
			creates := func() int {
				n := 0
				for _, a := range h.kube.Actions() {
					if a.GetVerb() == "create" && a.GetResource().Resource == "events" {
						n++
					}
				}
				return n
			}
			before := creates()
			pod.Labels = map[string]string{"touched": "1"}
			if _, err := h.kube.CoreV1().Pods("ns").Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			if n := creates(); n != before {
				t.Errorf("a second look at the pod created %d more events", n-before)
			}
			// A restarted agent records nothing new and stops nothing.
			h.stop()
			h2 := startWith(t, setup{kube: h.kube}, rt)
			waitFor(t, "the restarted agent to leave the sidecar running", func() bool {
				return testutil.ToFloat64(h2.metrics.stops.WithLabelValues(resultSkipped)) == 1
			})
			if evs := h2.events(t); len(evs) != 2 {
				t.Errorf("%d events after a restart, want the two", len(evs))
			}
			if ids, _ := rt.stopCalls(); len(ids) != 1 {
				t.Errorf("StopContainer calls = %v, want proxy's only", ids)
			}
		})
	}
}

// A stopped sidecar whose exit event is late is still known exited, from the runtime's
// answer to the stop: the attempt the kubelet starts meanwhile is the same sidecar
// restarted, left running with a warning, not a second sidecar to stop.
func TestRestartBeforeTheStoppedSidecarsExitEvent(t *testing.T) {
	rt := newFakeRuntime()
	rt.stopExit = 143
	rt.lateExits = map[string]*cri.TaskEvent{"proxy": nil}
	pod := regularSidecarPod("job", "uid", corev1.RestartPolicyOnFailure, nil)
	now := time.Now()
	rt.add(cri.Container{ID: "main", PodUID: "uid", Name: "main", State: cri.StateRunning, CreatedAt: now})
	rt.add(cri.Container{ID: "proxy", PodUID: "uid", Name: "proxy", State: cri.StateRunning, CreatedAt: now})
	h := start(t, rt, pod)
	rt.exit("main", 0, time.Now())
	h.waitRecorded(t, "proxy")

	rt.add(cri.Container{ID: "proxy-1", PodUID: "uid", Name: "proxy", Attempt: 1, State: cri.StateRunning, CreatedAt: time.Now()})
	pod.Labels = map[string]string{"restarted": "1"}
	if _, err := h.kube.CoreV1().Pods("ns").Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, `sextant_sidecar_stops_total{result="skipped"} to reach 1`, func() bool {
		return testutil.ToFloat64(h.metrics.stops.WithLabelValues(resultSkipped)) == 1
	})
	rt.sendLateExit(t, "proxy")
	if ids, _ := rt.stopCalls(); len(ids) != 1 || ids[0] != "proxy" {
		t.Errorf("StopContainer calls = %v, want proxy once", ids)
	}
	var reasons []string
	for _, ev := range h.events(t) {
		reasons = append(reasons, ev.Reason)
	}
	slices.Sort(reasons)
	if !slices.Equal(reasons, []string{"SidecarNotStopped", "SidecarStopped"}) {
		t.Errorf("Events %v, want SidecarNotStopped and SidecarStopped", reasons)
	}
}

// The kubelet never stops a container with less than 2 s of grace, and a grace period
// beyond what a time.Duration holds must not wrap into a negative one.
func TestStopGracePeriodBounds(t *testing.T) {
	cases := []struct {
		name  string
		grace int64
		want  time.Duration
	}{
		{"zero", 0, 2 * time.Second},
		{"one second", 1, 2 * time.Second},
		{"two seconds", 2, 2 * time.Second},
		{"beyond a time.Duration", 10_000_000_000, sidecarrules.MaxGracePeriod},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rt := newFakeRuntime()
			pod := jobPod("job", "uid", corev1.RestartPolicyNever)
			pod.Spec.TerminationGracePeriodSeconds = ptr.To(c.grace)
			rt.add(cri.Container{ID: "main", PodUID: "uid", Name: "main", State: cri.StateExited, FinishedAt: time.Now()})
			rt.add(cri.Container{ID: "proxy", PodUID: "uid", Name: "proxy", State: cri.StateRunning})
			h := start(t, rt, pod)
			waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
			h.waitRecorded(t, "proxy")
			_, timeouts := rt.stopCalls()
			if len(timeouts) != 1 {
				t.Fatalf("StopContainer calls with %v, want one", timeouts)
			}
			got := timeouts[0]
			if got != c.want {
				t.Errorf("StopContainer timeout = %v, want %v", got, c.want)
			}
			m, err := parseStopMark(rt.mark("proxy"), "proxy")
			if err != nil || m.Grace != got {
				t.Errorf("mark %q parses to %+v, %v; want the grace period of the stop, %v", rt.mark("proxy"), m, err, got)
			}
		})
	}
}

// containerd copies an image's labels into its containers' labels: an image can carry
// a stop mark. One that is not the container's own is no mark.
func TestForgedStopMarkIgnored(t *testing.T) {
	other := strings.Repeat("ab", 32) // another container's ID
	at := time.Now().Add(-time.Minute).UnixNano()
	cases := []struct {
		name        string
		mainRunning bool
		mark        string
	}{
		{"stop in progress, main running", true, fmt.Sprintf("v1:%d:0", at)},
		{"another container's stop in progress, main running", true, fmt.Sprintf("v2:%s:%d:0", other, at)},
		{"recorded, main done", false, fmt.Sprintf("v1:%d:30:recorded", at)},
		{"another container's record, main done", false, fmt.Sprintf("v2:%s:%d:30:recorded", other, at)},
		{"garbage, main done", false, "stopped"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rt := newFakeRuntime()
			pod := jobPod("job", "uid", corev1.RestartPolicyNever)
			main := cri.Container{ID: "main", PodUID: "uid", Name: "main", State: cri.StateRunning}
			if !c.mainRunning {
				main.State, main.FinishedAt = cri.StateExited, time.Now()
			}
			rt.add(main)
			rt.add(cri.Container{ID: "proxy", PodUID: "uid", Name: "proxy", State: cri.StateRunning, StopMark: c.mark})
			h := start(t, rt, pod)
			if c.mainRunning {
				time.Sleep(200 * time.Millisecond)
				if ids, _ := rt.stopCalls(); len(ids) != 0 {
					t.Fatalf("stopped %v while the main container runs", ids)
				}
				rt.exit("main", 0, time.Now())
			}
			waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
			// A stop of its own: SIGTERM with the pod's grace period, not the forged one.
			if ids, timeouts := rt.stopCalls(); len(ids) != 1 || ids[0] != "proxy" || timeouts[0] != 5*time.Second {
				t.Errorf("StopContainer calls = %v with %v, want proxy once with the pod's 5s", ids, timeouts)
			}
		})
	}
}

// A stop an earlier agent made but did not record, whose Event the API refuses for now,
// does not hold up the stop of the pod's other sidecar; the record is retried.
func TestFailedRecordDoesNotHoldOtherStops(t *testing.T) {
	rt := newFakeRuntime()
	pod := jobPod("job", "uid", corev1.RestartPolicyNever)
	logs := pod.Spec.InitContainers[0]
	logs.Name = "logs"
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, logs)
	done := time.Now().Add(-time.Second)
	rt.add(cri.Container{ID: "main", PodUID: "uid", Name: "main", State: cri.StateExited, FinishedAt: done})
	rt.add(cri.Container{ID: "proxy", PodUID: "uid", Name: "proxy", State: cri.StateExited, FinishedAt: done,
		StopMark: markFor("proxy", stopMark{Requested: done, Grace: 5 * time.Second})})
	rt.add(cri.Container{ID: "logs", PodUID: "uid", Name: "logs", State: cri.StateRunning})

	kube := fake.NewClientset()
	var refusing atomic.Bool
	refusing.Store(true)
	kube.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
		if refusing.Load() && ev.InvolvedObject.FieldPath == "spec.initContainers{proxy}" {
			return true, nil, apierrors.NewTooManyRequests("slow down", 1)
		}
		return false, nil, nil
	})
	h := startWith(t, setup{kube: kube}, rt, pod)
	waitFor(t, "the other sidecar to be stopped", func() bool {
		ids, _ := rt.stopCalls()
		return slices.Contains(ids, "logs")
	})
	refusing.Store(false)
	waitFor(t, "both stops recorded", func() bool { return len(h.events(t)) == 2 })
	if ids, _ := rt.stopCalls(); len(ids) != 1 {
		t.Errorf("StopContainer calls = %v, want logs once", ids)
	}
	waitFor(t, "the earlier stop's mark recorded", func() bool { return strings.HasSuffix(rt.mark("proxy"), ":recorded") })
}

// hangingAPI is an API server whose Event creation for one pod does not answer until
// released or until the caller gives up.
type hangingAPI struct {
	kubernetes.Interface
	pod     string
	release chan struct{}
	hangs   atomic.Int32 // calls that hung, in all
}

func (a *hangingAPI) CoreV1() corev1client.CoreV1Interface {
	return hangingCore{CoreV1Interface: a.Interface.CoreV1(), api: a}
}

type hangingCore struct {
	corev1client.CoreV1Interface
	api *hangingAPI
}

func (c hangingCore) Events(ns string) corev1client.EventInterface {
	return hangingEvents{EventInterface: c.CoreV1Interface.Events(ns), api: c.api}
}

type hangingEvents struct {
	corev1client.EventInterface
	api *hangingAPI
}

func (e hangingEvents) Create(ctx context.Context, ev *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error) {
	if ev.InvolvedObject.Name == e.api.pod {
		e.api.hangs.Add(1)
		select {
		case <-e.api.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return e.EventInterface.Create(ctx, ev, opts)
}

// An API call that does not answer holds a worker only until its deadline: with one
// worker, another pod's sidecar is still stopped.
func TestHungEventCallDoesNotHoldTheWorker(t *testing.T) {
	rt := newFakeRuntime()
	done := time.Now().Add(-time.Second)
	a := jobPod("job-a", "uid-a", corev1.RestartPolicyNever)
	rt.add(cri.Container{ID: "main-a", PodUID: "uid-a", Name: "main", State: cri.StateExited, FinishedAt: done})
	rt.add(cri.Container{ID: "proxy-a", PodUID: "uid-a", Name: "proxy", State: cri.StateExited, FinishedAt: done,
		StopMark: markFor("proxy-a", stopMark{Requested: done, Grace: 5 * time.Second})})
	b := jobPod("job-b", "uid-b", corev1.RestartPolicyNever)
	rt.add(cri.Container{ID: "main-b", PodUID: "uid-b", Name: "main", State: cri.StateRunning})
	rt.add(cri.Container{ID: "proxy-b", PodUID: "uid-b", Name: "proxy", State: cri.StateRunning})

	api := &hangingAPI{pod: "job-a", release: make(chan struct{})}
	startWith(t, setup{
		cfg:    Config{Workers: 1, APITimeout: 100 * time.Millisecond},
		client: func(k kubernetes.Interface) kubernetes.Interface { api.Interface = k; return api },
	}, rt, a, b)
	defer close(api.release)
	waitFor(t, "the worker to call the hung API", func() bool { return api.hangs.Load() > 0 })
	rt.exit("main-b", 0, time.Now())
	waitFor(t, "job-b's sidecar to be stopped", func() bool {
		ids, _ := rt.stopCalls()
		return slices.Contains(ids, "proxy-b")
	})
}
