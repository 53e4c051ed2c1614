package numapin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"sextant.io/sextant/agent/nodepods"
	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/cri"
)

const node = "node-a"

// twoNUMA is the e2e's split of a 4-CPU machine: node 0 with memory, node 1 without.
var twoNUMA = []v1alpha1.NUMANode{
	{ID: 0, CPUs: []int32{0, 1}, MemoryBytes: 8 << 30, Distances: []int32{10, 20}},
	{ID: 1, CPUs: []int32{2, 3}, Distances: []int32{20, 10}},
}

// tree is a cgroup hierarchy the tests build: the kubelet's part of it is what the
// test does, the pinner's what it is tested on.
type tree struct {
	t    *testing.T
	root string // what the pinner is given as --cgroup-root
	dir  string // the cpuset hierarchy
	v2   bool
	// mu orders the test's writes with the simulated kernel's (kernel): a kernel pass
	// that read a request before the test settled a cgroup and wrote after would put
	// back a stale set in force, and the pinner would narrow again a cgroup that has a
	// container by then.
	mu sync.Mutex
}

func newTree(t *testing.T, v2 bool) *tree {
	tr := &tree{t: t, root: t.TempDir(), v2: v2}
	tr.dir = filepath.Join(tr.root, "cpuset")
	if v2 {
		tr.dir = tr.root
		tr.write(tr.root, "cgroup.controllers", "cpuset cpu memory")
	}
	tr.mkdir(tr.dir, "0-3", "0")
	for _, d := range []string{"kubepods", "kubepods/burstable", "kubepods/besteffort"} {
		tr.mkdir(filepath.Join(tr.dir, d), "0-3", "0")
	}
	return tr
}

func (tr *tree) write(dir, file, value string) {
	tr.t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value+"\n"), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) read(dir, file string) string {
	tr.t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		tr.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// mkdir makes a cgroup as the kernel shows it: on v1 with the set the kubelet and runc
// copy from the parent, on v2 empty (inherit), effective files holding what is in force.
func (tr *tree) mkdir(dir, cpus, mems string) {
	tr.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if tr.v2 {
		tr.write(dir, "cpuset.cpus", "")
		tr.write(dir, "cpuset.mems", "")
		tr.write(dir, "cpuset.cpus.effective", cpus)
		tr.write(dir, "cpuset.mems.effective", mems)
		return
	}
	tr.write(dir, "cpuset.cpus", cpus)
	tr.write(dir, "cpuset.mems", mems)
	tr.write(dir, "cpuset.effective_cpus", cpus)
	tr.write(dir, "cpuset.effective_mems", mems)
}

// holds reports whether the cgroup requests exactly these CPUs and memory nodes. The
// pinner writes the CPUs, then the memory nodes: a test that waits on the CPUs alone
// reads the memory nodes before their write (on v2 still empty) or during it (a fixture
// file is truncated, then written).
func (tr *tree) holds(dir, cpus, mems string) bool {
	return tr.read(dir, "cpuset.cpus") == cpus && tr.read(dir, "cpuset.mems") == mems
}

// dump lists every cgroup of the tree with its cpuset files, for a failed wait's
// message: a wait that times out is rare, and its cause is in these files.
func (tr *tree) dump() string {
	var b strings.Builder
	_ = filepath.WalkDir(tr.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(tr.dir, path)
		fmt.Fprintf(&b, "  %s:", rel)
		files, _ := filepath.Glob(filepath.Join(path, "cpuset.*"))
		for _, f := range files {
			v, _ := os.ReadFile(f)
			fmt.Fprintf(&b, " %s=%q", strings.TrimPrefix(filepath.Base(f), "cpuset."), strings.TrimSpace(string(v)))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

// settle plays the kernel's part after writes: effective = requested (or the parent's
// where a v2 cgroup requests nothing).
func (tr *tree) settle(dir string) {
	tr.t.Helper()
	if tr.v2 {
		for _, f := range []string{"cpus", "mems"} {
			if v := tr.read(dir, "cpuset."+f); v != "" {
				tr.write(dir, "cpuset."+f+".effective", v)
			}
		}
		return
	}
	tr.write(dir, "cpuset.effective_cpus", tr.read(dir, "cpuset.cpus"))
	tr.write(dir, "cpuset.effective_mems", tr.read(dir, "cpuset.mems"))
}

// kernel settles every cgroup of the tree every few milliseconds until ctx ends, as
// the kernel makes writes take effect.
func (tr *tree) kernel(ctx context.Context) {
	for ctx.Err() == nil {
		_ = filepath.WalkDir(tr.dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				tr.settleQuietly(path)
			}
			return nil
		})
		time.Sleep(2 * time.Millisecond)
	}
}

func (tr *tree) settleQuietly(dir string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	suffix := []string{"effective_cpus", "effective_mems"}
	if tr.v2 {
		suffix = []string{"cpus.effective", "mems.effective"}
	}
	for i, f := range []string{"cpus", "mems"} {
		b, err := os.ReadFile(filepath.Join(dir, "cpuset."+f))
		v := strings.TrimSpace(string(b))
		if err != nil || v == "" {
			continue
		}
		eff := filepath.Join(dir, "cpuset."+suffix[i])
		if cur, err := os.ReadFile(eff); err == nil && strings.TrimSpace(string(cur)) != v {
			_ = os.WriteFile(eff, []byte(v+"\n"), 0o644)
		}
	}
}

func (tr *tree) podDir(uid types.UID) string {
	return filepath.Join(tr.dir, "kubepods", "burstable", "pod"+string(uid))
}

// fakeRuntime holds the containers of pods and records cpuset updates.
type fakeRuntime struct {
	mu         sync.Mutex
	containers map[string][]cri.Container
	cpusets    map[string][2]string
	updates    []string
}

func (f *fakeRuntime) PodContainers(_ context.Context, uid string) ([]cri.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]cri.Container(nil), f.containers[uid]...), nil
}

func (f *fakeRuntime) ContainerCpuset(_ context.Context, id string) (string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cs := f.cpusets[id]
	return cs[0], cs[1], nil
}

func (f *fakeRuntime) UpdateCpuset(_ context.Context, id, cpus, mems string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cpusets[id] = [2]string{cpus, mems}
	f.updates = append(f.updates, id+"="+cpus+"/"+mems)
	return nil
}

func (f *fakeRuntime) updated() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.updates...)
}

type harness struct {
	t      *testing.T
	tree   *tree
	kube   *fake.Clientset
	rt     *fakeRuntime
	reg    *prometheus.Registry
	static KubeletPinning
	// policyDown makes the kubelet's CPU and memory manager policies unanswerable.
	policyDown atomic.Bool
	cancel     context.CancelFunc
	done       chan struct{}
	p          *Pinner
}

func newHarness(t *testing.T, tr *tree, pods ...*corev1.Pod) *harness {
	h := &harness{t: t, tree: tr, rt: &fakeRuntime{containers: map[string][]cri.Container{}, cpusets: map[string][2]string{}}}
	objs := make([]runtime.Object, 0, len(pods))
	for _, p := range pods {
		objs = append(objs, p)
	}
	h.kube = fake.NewClientset(objs...)
	return h
}

func (h *harness) start() {
	h.t.Helper()
	h.reg = prometheus.NewRegistry()
	inf := nodepods.NewInformer(h.kube, node)
	p, err := New(Config{NodeName: node, CgroupRoot: h.tree.root, Resync: 200 * time.Millisecond}, h.kube, inf, h.rt,
		func() ([]v1alpha1.NUMANode, error) { return twoNUMA, nil },
		func(context.Context) (KubeletPinning, error) {
			if h.policyDown.Load() {
				return KubeletPinning{}, errors.New("the kubelet's PodResources socket does not answer")
			}
			return h.static, nil
		},
		NewMetrics(h.reg), logr.Discard())
	if err != nil {
		h.t.Fatal(err)
	}
	h.p = p
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go h.tree.kernel(ctx)
	go inf.Run(ctx.Done())
	go func() { defer close(h.done); _ = p.Run(ctx) }()
	h.t.Cleanup(h.stop)
	h.eventually("the pinner is ready", p.Ready)
}

func (h *harness) stop() {
	if h.cancel != nil {
		h.cancel()
		<-h.done
		h.cancel = nil
	}
}

// eventuallyWithin bounds a wait only against a hang: a busy machine may take seconds
// to run the pinner's workers and the fake kernel.
const eventuallyWithin = 30 * time.Second

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, eventuallyWithin, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		h.t.Fatalf("%s: not within %v; the cgroups then:\n%s the pinner's counters: %s", what, eventuallyWithin, h.tree.dump(), h.counters())
	}
}

// counters lists the pinner's non-zero counters with their labels, for a failed wait's
// message.
func (h *harness) counters() string {
	mfs, err := h.reg.Gather()
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetCounter().GetValue() == 0 {
				continue
			}
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetValue())
			}
			out = append(out, fmt.Sprintf("%s{%s}=%v", mf.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue()))
		}
	}
	return strings.Join(out, " ")
}

func (h *harness) counter(name, label string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return 0
}

func (h *harness) events(reason string) []corev1.Event {
	h.t.Helper()
	list, err := h.kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func pod(name, uid, numa string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	if numa != "" {
		p.Annotations = map[string]string{annotations.NUMANodes: numa}
	}
	return p
}

const (
	uidA = "0b8c6a8e-5b3e-4c1a-9c6e-2f1d3a4b5c6d"
	uidB = "1c9d7b9f-6c4f-4d2b-8d7f-3a2e4b5c6d7e"
)

// TestPodCgroupPath: the kubelet makes the pod's cgroup after the pinner saw the pod;
// the pinner narrows it before any container cgroup exists, and confirms once the
// sandbox's cgroup appears inside, with the set inherited.
func TestPodCgroupPath(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			tr := newTree(t, v2)
			h := newHarness(t, tr, pod("p", uidA, "1"))
			h.start()
			dir := tr.podDir(uidA)
			tr.mkdir(dir, "0-3", "0") // the kubelet
			// Memory node 0: node 1 has no memory, and node 0 is the nearest with memory.
			h.eventually("pod cgroup narrowed to cpus 2-3, mems 0", func() bool { return tr.holds(dir, "2-3", "0") })
			tr.settle(dir)
			// runc makes the sandbox's cgroup, copying the (narrowed) parent.
			tr.mkdir(filepath.Join(dir, "sandbox"), "2-3", "0")
			h.eventually("pin confirmed", func() bool { return h.counter("sextant_numa_pins_total", pathPodCgroup) == 1 })
			h.eventually("pin latency observed", func() bool { return h.counter("sextant_numa_pin_seconds", pathPodCgroup) >= 1 })
			if n := h.counter("sextant_numa_pin_seconds", pathPodCgroup); n != 1 {
				t.Errorf("pin_seconds has %v samples, want 1", n)
			}
			// The event is recorded after the pin is counted.
			h.eventually("NUMAPinned event", func() bool { return len(h.events("NUMAPinned")) >= 1 })
			if ev := h.events("NUMAPinned"); len(ev) != 1 || !strings.Contains(ev[0].Message, "cpus 2-3 mems 0") {
				t.Errorf("NUMAPinned events %+v", ev)
			}
			if h.p.watcher.Load().Following() != 0 {
				t.Error("still following a confirmed pod's cgroup")
			}
			if got := testutil.ToFloat64(h.p.metrics.pinned); got != 1 {
				t.Errorf("pinned pods gauge %v, want 1", got)
			}
		})
	}
}

// TestKubeletCopyAfterNarrowing: on v1 the kubelet copies the parent's set into a new
// pod cgroup right after making it; a copy that lands after the narrowing is undone.
func TestKubeletCopyAfterNarrowing(t *testing.T) {
	tr := newTree(t, false)
	h := newHarness(t, tr, pod("p", uidA, "0"))
	h.start()
	dir := tr.podDir(uidA)
	tr.mkdir(dir, "0-3", "0")
	h.eventually("pod cgroup narrowed", func() bool { return tr.holds(dir, "0-1", "0") })
	tr.write(dir, "cpuset.cpus", "0-3") // the late copy
	h.eventually("narrowed again", func() bool { return tr.holds(dir, "0-1", "0") })
	tr.settle(dir)
	tr.mkdir(filepath.Join(dir, "sandbox"), "0-1", "0")
	h.eventually("pin confirmed", func() bool { return h.counter("sextant_numa_pins_total", pathPodCgroup) == 1 })
	if n := h.counter("sextant_numa_pins_total", pathRepair); n != 0 {
		t.Errorf("%v repairs counted for a copy before any container", n)
	}
}

// TestCatchUpPath: containers ran before the pinner looked (an agent that was down):
// children are narrowed, then the pod, and the runtime is told through CRI.
func TestCatchUpPath(t *testing.T) {
	tr := newTree(t, false)
	dir := tr.podDir(uidA)
	tr.mkdir(dir, "0-3", "0")
	tr.mkdir(filepath.Join(dir, "sandbox"), "0-3", "0")
	tr.mkdir(filepath.Join(dir, "c1"), "0-3", "0")
	h := newHarness(t, tr, pod("p", uidA, "0"))
	h.rt.containers[uidA] = []cri.Container{
		{ID: "c1", PodUID: uidA, Name: "main", State: cri.StateRunning, CreatedAt: time.Now().Add(-time.Minute)},
		{ID: "c0", PodUID: uidA, Name: "init", State: cri.StateExited, CreatedAt: time.Now().Add(-2 * time.Minute)},
	}
	h.start()
	h.eventually("catch-up pin", func() bool { return h.counter("sextant_numa_pins_total", pathCatchUp) == 1 })
	for _, d := range []string{dir, filepath.Join(dir, "sandbox"), filepath.Join(dir, "c1")} {
		if got := tr.read(d, "cpuset.cpus"); got != "0-1" {
			t.Errorf("%s: cpus %q, want 0-1", d, got)
		}
		if got := tr.read(d, "cpuset.memory_migrate"); got != "1" {
			t.Errorf("%s: memory_migrate %q, want 1 (pages move with a catch-up)", d, got)
		}
	}
	h.eventually("runtime told", func() bool { return len(h.rt.updated()) == 1 })
	if got := h.rt.updated(); got[0] != "c1=0-1/0" {
		t.Errorf("runtime updates %v, want only the running container", got)
	}
}

// TestUntouched: pods without the annotation, finished pods and pods of other nodes'
// cgroups are never written.
func TestUntouched(t *testing.T) {
	tr := newTree(t, false)
	dir := tr.podDir(uidA)
	tr.mkdir(dir, "0-3", "0")
	tr.mkdir(filepath.Join(dir, "c"), "0-3", "0")
	done := pod("done", uidB, "1")
	done.Status.Phase = corev1.PodSucceeded
	tr.mkdir(tr.podDir(uidB), "0-3", "0")
	h := newHarness(t, tr, pod("plain", uidA, ""), done)
	h.start()
	time.Sleep(500 * time.Millisecond) // two resyncs: nothing may happen, so there is nothing to poll for
	for _, d := range []string{dir, tr.podDir(uidB)} {
		if got := tr.read(d, "cpuset.cpus"); got != "0-3" {
			t.Errorf("%s written: %q", d, got)
		}
	}
	if n := h.counter("sextant_numa_pins_total", pathPodCgroup) + h.counter("sextant_numa_pins_total", pathCatchUp); n != 0 {
		t.Errorf("%v pins", n)
	}
}

// TestRefusals: values the node cannot carry out leave the pod as the kubelet made it,
// with one Warning event and a counted reason each.
func TestRefusals(t *testing.T) {
	tr := newTree(t, false)
	tr.mkdir(tr.podDir(uidA), "0-3", "0")
	tr.mkdir(tr.podDir(uidB), "0-3", "0")
	h := newHarness(t, tr, pod("unknown", uidA, "0,3"), pod("malformed", uidB, "one"))
	h.start()
	h.eventually("refusals counted", func() bool {
		return h.counter("sextant_numa_pin_failures_total", reasonUnknownNUMANode) == 1 &&
			h.counter("sextant_numa_pin_failures_total", reasonMalformed) == 1
	})
	time.Sleep(500 * time.Millisecond) // resyncs must not count them again
	if n := h.counter("sextant_numa_pin_failures_total", reasonUnknownNUMANode); n != 1 {
		t.Errorf("unknown NUMA node counted %v times, want once", n)
	}
	h.eventually("two NUMAPinRefused events", func() bool { return len(h.events("NUMAPinRefused")) >= 2 })
	if ev := h.events("NUMAPinRefused"); len(ev) != 2 {
		t.Fatalf("%d NUMAPinRefused events, want 2", len(ev))
	}
	for _, d := range []string{tr.podDir(uidA), tr.podDir(uidB)} {
		if got := tr.read(d, "cpuset.cpus"); got != "0-3" {
			t.Errorf("%s written: %q", d, got)
		}
	}
}

// TestAnnotationChangedAfterPin: the first decision stands.
func TestAnnotationChangedAfterPin(t *testing.T) {
	tr := newTree(t, false)
	dir := tr.podDir(uidA)
	h := newHarness(t, tr, pod("p", uidA, "0"))
	h.start()
	tr.mkdir(dir, "0-3", "0")
	h.eventually("narrowed", func() bool { return tr.holds(dir, "0-1", "0") })
	tr.settle(dir)
	tr.mkdir(filepath.Join(dir, "c"), "0-1", "0")
	h.eventually("confirmed", func() bool { return h.counter("sextant_numa_pins_total", pathPodCgroup) == 1 })
	if _, err := h.kube.CoreV1().Pods("default").Update(context.Background(), pod("p", uidA, "1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("change reported", func() bool { return len(h.events("NUMAAnnotationChanged")) == 1 })
	time.Sleep(300 * time.Millisecond)
	if got := tr.read(dir, "cpuset.cpus"); got != "0-1" {
		t.Errorf("cpus %q after the annotation changed, want the first decision 0-1", got)
	}
}

// TestRestart: a restarted agent writes nothing, records nothing and counts nothing for
// pods already pinned; it repairs a pod cgroup someone else narrowed to another set than
// the annotation's; and it catches up a pod that started while it was down.
func TestRestart(t *testing.T) {
	tr := newTree(t, false)
	pinned, changed, missed := tr.podDir(uidA), tr.podDir(uidB), tr.podDir("2d0e8ca0-7d50-4e3c-9e80-4b3f5c6d7e8f")
	for _, d := range []string{pinned, changed} {
		tr.mkdir(d, "2-3", "0")
		tr.mkdir(filepath.Join(d, "c"), "2-3", "0")
	}
	tr.mkdir(missed, "0-3", "0")
	tr.mkdir(filepath.Join(missed, "c"), "0-3", "0")
	h := newHarness(t, tr, pod("pinned", uidA, "1"), pod("changed", uidB, "0"), pod("missed", "2d0e8ca0-7d50-4e3c-9e80-4b3f5c6d7e8f", "1"))
	before, _ := os.Stat(filepath.Join(pinned, "cpuset.cpus"))
	h.start()
	h.eventually("missed pod caught up", func() bool { return h.counter("sextant_numa_pins_total", pathCatchUp) == 1 })
	h.eventually("foreign set repaired", func() bool { return tr.holds(changed, "0-1", "0") })
	h.eventually("repair counted", func() bool { return h.counter("sextant_numa_pins_total", pathRepair) == 1 })
	h.eventually("NUMAPinRepaired event", func() bool { return len(h.events("NUMAPinRepaired")) == 1 })
	time.Sleep(300 * time.Millisecond)
	if ev := h.events("NUMAAnnotationChanged"); len(ev) != 0 {
		t.Errorf("NUMAAnnotationChanged events %+v after a restart, want none: the annotation did not change", ev)
	}
	if n := h.counter("sextant_numa_pins_total", pathPodCgroup); n != 0 {
		t.Errorf("%v pod-cgroup pins counted after a restart, want 0", n)
	}
	// Announced: the caught-up pod, and the repaired one, which no earlier agent
	// announced in this fixture (where one had, the same event name finds it there).
	h.eventually("NUMAPinned events", func() bool { return len(h.events("NUMAPinned")) >= 2 })
	var announced []string
	for _, ev := range h.events("NUMAPinned") {
		announced = append(announced, ev.InvolvedObject.Name)
	}
	slices.Sort(announced)
	if !slices.Equal(announced, []string{"changed", "missed"}) {
		t.Errorf("NUMAPinned events on %v, want changed and missed", announced)
	}
	after, _ := os.Stat(filepath.Join(pinned, "cpuset.cpus"))
	if !after.ModTime().Equal(before.ModTime()) {
		t.Error("the pinned pod's cgroup was written again")
	}
	if got := tr.read(filepath.Join(changed, "c"), "cpuset.cpus"); got != "0-1" {
		t.Errorf("changed pod's container: cpus %q, want 0-1", got)
	}
	// The already-pinned pod is confirmed by a worker on its own schedule.
	h.eventually("all three pods pinned in the gauge", func() bool { return testutil.ToFloat64(h.p.metrics.pinned) == 3 })
}

// TestRepair: a pinned pod's cgroup widened by something else is narrowed again at the
// next resync.
func TestRepair(t *testing.T) {
	tr := newTree(t, false)
	dir := tr.podDir(uidA)
	tr.mkdir(dir, "2-3", "0")
	tr.mkdir(filepath.Join(dir, "c"), "2-3", "0")
	h := newHarness(t, tr, pod("p", uidA, "1"))
	h.start()
	h.eventually("confirmed", func() bool { return testutil.ToFloat64(h.p.metrics.pinned) == 1 })
	tr.write(dir, "cpuset.cpus", "0-3")
	tr.settle(dir)
	h.eventually("repaired", func() bool { return h.counter("sextant_numa_pins_total", pathRepair) == 1 })
	if got := tr.read(dir, "cpuset.cpus"); got != "2-3" {
		t.Errorf("cpus %q, want 2-3", got)
	}
}

// TestStaticCPUManager: with the kubelet's static CPU manager policy, or its Static
// memory manager policy, nothing is pinned, and no event per pod says so.
func TestStaticCPUManager(t *testing.T) {
	for _, tc := range []struct {
		kubelet KubeletPinning
		reason  string
		state   v1alpha1.NUMAPinning
	}{
		{KubeletPinning{StaticCPU: true}, reasonStaticCPUManager, v1alpha1.PinningKubeletStaticCPUManager},
		{KubeletPinning{StaticMemory: true}, reasonStaticMemManager, v1alpha1.PinningKubeletStaticMemoryManager},
		{KubeletPinning{StaticCPU: true, StaticMemory: true}, reasonStaticCPUManager, v1alpha1.PinningKubeletStaticCPUManager},
	} {
		t.Run(string(tc.state)+" "+tc.reason, func(t *testing.T) {
			tr := newTree(t, false)
			dir := tr.podDir(uidA)
			h := newHarness(t, tr, pod("p", uidA, "1"))
			h.static = tc.kubelet
			h.start()
			tr.mkdir(dir, "0-3", "0")
			h.eventually("refusal counted", func() bool { return h.counter("sextant_numa_pin_failures_total", tc.reason) == 1 })
			time.Sleep(300 * time.Millisecond)
			if got := tr.read(dir, "cpuset.cpus"); got != "0-3" {
				t.Errorf("cpus %q under a static kubelet policy, want the kubelet's", got)
			}
			if got := h.p.State(); got != tc.state {
				t.Errorf("state %q, want %q", got, tc.state)
			}
			if ev := h.events("NUMAPinRefused"); len(ev) != 0 {
				t.Errorf("events %v, want none per pod", ev)
			}
		})
	}
}

// TestPinFailingEvent: a pod whose cgroup cannot be written is retried, and after a few
// failed attempts gets one Warning Event naming the cause, also when it first waited
// for the kubelet's answer.
func TestPinFailingEvent(t *testing.T) {
	tr := newTree(t, false)
	dir := tr.podDir(uidA)
	tr.mkdir(dir, "0-3", "0")
	// A directory where the kernel has the file: every write fails, root or not.
	if err := os.Remove(filepath.Join(dir, "cpuset.cpus")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "cpuset.cpus"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, tr, pod("p", uidA, "1"))
	// First the kubelet does not answer: the waits for it are no failures of the pod's
	// and must not use up the attempts before the event.
	h.policyDown.Store(true)
	h.start()
	time.Sleep(500 * time.Millisecond)
	h.policyDown.Store(false)
	h.eventually("NUMAPinFailing recorded", func() bool { return len(h.events("NUMAPinFailing")) == 1 })
	ev := h.events("NUMAPinFailing")[0]
	if ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.Name != "p" || !strings.Contains(ev.Message, "cpuset.cpus") {
		t.Errorf("event %s %s on %s: %q; want a Warning on p naming cpuset.cpus", ev.Type, ev.Reason, ev.InvolvedObject.Name, ev.Message)
	}
	h.eventually("still retried", func() bool { return h.counter("sextant_numa_pin_failures_total", reasonCgroup) >= failingAfter+1 })
	if n := len(h.events("NUMAPinFailing")); n != 1 {
		t.Errorf("%d NUMAPinFailing events, want one per pod", n)
	}
}

// TestUnknownCPUManagerPolicy: while the kubelet has not said whether it runs the static
// policy, nothing is pinned (a narrowed pod cgroup would break the containers the
// kubelet pins itself); once it answers, the pod is pinned without waiting for a
// resync.
func TestUnknownCPUManagerPolicy(t *testing.T) {
	tr := newTree(t, false)
	dir := tr.podDir(uidA)
	h := newHarness(t, tr, pod("p", uidA, "1"))
	h.policyDown.Store(true)
	h.start()
	tr.mkdir(dir, "0-3", "0")
	time.Sleep(500 * time.Millisecond) // nothing may happen, so there is nothing to poll for
	if got := tr.read(dir, "cpuset.cpus"); got != "0-3" {
		t.Fatalf("cpus %q while the kubelet's policy is unknown, want the pod's cgroup untouched", got)
	}
	if got := h.p.State(); got != v1alpha1.PinningPending {
		t.Errorf("state %q while the kubelet's policy is unknown, want %q", got, v1alpha1.PinningPending)
	}
	if ev := h.events("NUMAPinFailing"); len(ev) != 0 {
		t.Errorf("waiting for the kubelet recorded %v, want no failure event: the pod did not fail", ev)
	}
	// A kubelet silent for longer than the agent waits: the node stops counting as one
	// that pins. Only State reads started.
	h.p.started = h.p.started.Add(-pendingLimit - time.Second)
	if got := h.p.State(); got != v1alpha1.PinningUnknown {
		t.Errorf("state %q after the kubelet was silent for %v, want %q", got, pendingLimit, v1alpha1.PinningUnknown)
	}
	h.policyDown.Store(false)
	h.eventually("pinned once the kubelet answers", func() bool { return tr.read(dir, "cpuset.cpus") == "2-3" })
	if got := h.p.State(); got != v1alpha1.PinningActive {
		t.Errorf("state %q once the kubelet answered, want %q", got, v1alpha1.PinningActive)
	}
}

// manual makes the pinner without running it, over the harness's pods: the test calls
// processNext itself, one attempt at a time, and sees what each one counted.
func (h *harness) manual(ctx context.Context) {
	h.t.Helper()
	h.reg = prometheus.NewRegistry()
	inf := nodepods.NewInformer(h.kube, node)
	p, err := New(Config{NodeName: node, CgroupRoot: h.tree.root}, h.kube, inf, h.rt,
		func() ([]v1alpha1.NUMANode, error) { return twoNUMA, nil }, nil, NewMetrics(h.reg), logr.Discard())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { p.queue.ShutDown(); p.rtQueue.ShutDown() })
	if _, err := p.findKubepods(ctx); err != nil {
		h.t.Fatal(err)
	}
	p.checkStaticPolicy(ctx)
	pods, err := h.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	for i := range pods.Items {
		if err := inf.GetStore().Add(&pods.Items[i]); err != nil {
			h.t.Fatal(err)
		}
		p.onPod(&pods.Items[i])
	}
	h.p = p
}

// TestNoCpusetFiles: on v2 a pod cgroup has no cpuset files until the cpuset controller
// is enabled in its parent's cgroup.subtree_control (runc under systemd does it after
// systemd made the pod's slice). The pod is retried, not dropped, and pinned once the
// files appear; a failure is counted, and NUMAPinFailing recorded, only once they have
// stayed away failingAfter attempts.
func TestNoCpusetFiles(t *testing.T) {
	for _, c := range []struct {
		name     string
		missing  int // attempts that find no cpuset files
		failures float64
	}{
		{"a moment", failingAfter - 1, 0},
		{"lasting", failingAfter + 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newTree(t, true)
			dir := tr.podDir(uidA)
			if err := os.MkdirAll(dir, 0o755); err != nil { // no cpuset.* files
				t.Fatal(err)
			}
			h := newHarness(t, tr, pod("p", uidA, "1"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go tr.kernel(ctx)
			h.manual(ctx)
			key := "default/p"
			for i := 1; i <= c.missing; i++ {
				h.p.processNext(ctx)
				if got := h.p.queue.NumRequeues(key); got != i {
					t.Fatalf("after %d attempts without cpuset files, %d retries queued, want %d: the pod was dropped", i, got, i)
				}
			}
			if got := h.counter("sextant_numa_pin_failures_total", reasonCgroup); got != c.failures {
				t.Errorf("%v cgroup failures counted after %d attempts, want %v", got, c.missing, c.failures)
			}
			ev := h.events("NUMAPinFailing")
			if lasting := c.missing >= failingAfter; len(ev) != map[bool]int{false: 0, true: 1}[lasting] {
				t.Errorf("%d NUMAPinFailing events after %d attempts", len(ev), c.missing)
			} else if lasting && !strings.Contains(ev[0].Message, "cpuset controller is not enabled") {
				t.Errorf("NUMAPinFailing %q does not say the cpuset controller is not enabled", ev[0].Message)
			}
			tr.mkdir(dir, "0-3", "0") // the controller enabled: the kernel makes the files
			for i := 0; i < failingAfter && !tr.holds(dir, "2-3", "0"); i++ {
				h.p.processNext(ctx)
			}
			if !tr.holds(dir, "2-3", "0") {
				t.Errorf("not narrowed once the cpuset files appeared; the cgroups:\n%s", tr.dump())
			}
		})
	}
}

// TestNarrowed: only a set someone wrote counts as another's narrowing. On v1 the
// kubelet's copy of the parent's set into a new pod cgroup is two writes, cpus then
// mems: read between them it is half written. On v2 an empty part means the parent's.
func TestNarrowed(t *testing.T) {
	for _, c := range []struct {
		v2         bool
		cpus, mems string
		want       bool
	}{
		{false, "2-3", "0", true},
		{false, "0-3", "0", false}, // the parent's
		{false, "0-3", "", false},  // the copy, half written
		{false, "", "", false},     // nothing written yet
		{false, "2-3", "", false},
		{true, "2-3", "0", true},
		{true, "2-3", "", true}, // mems as the parent
		{true, "", "0", false},  // cpus as the parent: all of it
		{true, "", "", false},
	} {
		t.Run(fmt.Sprintf("v2=%v cpus=%q mems=%q", c.v2, c.cpus, c.mems), func(t *testing.T) {
			tr := newTree(t, c.v2)
			dir := tr.podDir(uidA)
			tr.mkdir(dir, "0-3", "0")
			tr.write(dir, "cpuset.cpus", c.cpus)
			tr.write(dir, "cpuset.mems", c.mems)
			h := newHarness(t, tr)
			h.manual(context.Background())
			kp := h.p.kubepods.Load()
			cur, err := kp.Requested(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := h.p.narrowed(kp, dir, cur); got != c.want {
				t.Errorf("narrowed = %v, want %v", got, c.want)
			}
		})
	}
}

// TestHalfCopiedIsNotForeign: a new v1 pod cgroup read between the kubelet's two writes
// (cpus the parent's, mems empty) is pinned as any new pod, not repaired.
func TestHalfCopiedIsNotForeign(t *testing.T) {
	tr := newTree(t, false)
	dir := tr.podDir(uidA)
	tr.mkdir(dir, "0-3", "")
	h := newHarness(t, tr, pod("p", uidA, "1"))
	h.start()
	h.eventually("narrowed", func() bool { return tr.holds(dir, "2-3", "0") })
	tr.settle(dir)
	tr.mkdir(filepath.Join(dir, "sandbox"), "2-3", "0")
	h.eventually("pin confirmed", func() bool { return testutil.ToFloat64(h.p.metrics.pinned) == 1 })
	if n := h.counter("sextant_numa_pins_total", pathPodCgroup); n != 1 {
		t.Errorf("%v pod-cgroup pins, want 1", n)
	}
	if n := h.counter("sextant_numa_pins_total", pathRepair); n != 0 {
		t.Errorf("%v repairs counted for a new pod", n)
	}
	if ev := h.events("NUMAPinRepaired"); len(ev) != 0 {
		t.Errorf("NUMAPinRepaired for a new pod: %q", ev[0].Message)
	}
}
