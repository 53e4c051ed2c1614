package sidecar

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/agent/procsignal"
	"sextant.io/sextant/cri"
)

// fakeSignaller stands for procsignal.Signaller over the fake runtime: a process that
// is sent its stop signal exits with code, unless it ignores signals.
type fakeSignaller struct {
	rt     *fakeRuntime
	code   int32
	ignore bool
	refuse error // returned instead of signalling

	mu   sync.Mutex
	sent []sent
}

type sent struct {
	pid uint32
	id  string
	sig syscall.Signal
}

func (f *fakeSignaller) Signal(pid uint32, id string, sig syscall.Signal) error {
	if f.refuse != nil {
		return f.refuse
	}
	f.mu.Lock()
	f.sent = append(f.sent, sent{pid, id, sig})
	f.mu.Unlock()
	if !f.ignore {
		go f.rt.exit(id, f.code, time.Now())
	}
	return nil
}

func (f *fakeSignaller) calls() []sent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sent)
}

// signalPod is a Never Job pod with a running main and sidecar whose stop signal is sig.
func signalPod(rt *fakeRuntime, sig string, grace int64) *corev1.Pod {
	pod := jobPod("job", "uid", corev1.RestartPolicyNever)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(grace)
	now := time.Now()
	rt.add(cri.Container{ID: "main", PodUID: "uid", Name: "main", State: cri.StateRunning, CreatedAt: now, StopSignal: "SIGTERM"})
	rt.add(cri.Container{ID: "proxy", PodUID: "uid", Name: "proxy", State: cri.StateRunning, CreatedAt: now, StopSignal: sig})
	return pod
}

// The stop signal goes to the sidecar's process, with the signal its image names and
// the PID its start event gave; the runtime is asked to stop nothing.
func TestStopSignalsTheProcess(t *testing.T) {
	rt := newFakeRuntime()
	pod := signalPod(rt, "SIGQUIT", 5)
	rt.pids["proxy"] = 1 // what TaskPID would say: the start event's PID wins
	sig := &fakeSignaller{rt: rt}
	h := startWith(t, setup{cfg: Config{Signaller: sig}}, rt, pod)
	rt.exits <- cri.TaskEvent{ContainerID: "proxy", Started: true, Pid: 4242}
	// The fake marks the main exited before its event: a pass over the pod meanwhile
	// would stop the sidecar before its start event is read, which on a node comes long
	// before any main ends.
	waitFor(t, "the start event to be read", func() bool {
		h.term.mu.Lock()
		defer h.term.mu.Unlock()
		return h.term.pids["proxy"] == 4242
	})
	rt.exit("main", 0, time.Now())
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })

	if got := sig.calls(); len(got) != 1 || got[0] != (sent{4242, "proxy", syscall.SIGQUIT}) {
		t.Errorf("signals sent %v, want SIGQUIT to proxy's process 4242 once", got)
	}
	if ids, _ := rt.stopCalls(); len(ids) != 0 {
		t.Errorf("StopContainer calls %v, want none: the process exited on its signal", ids)
	}
	if ev := h.events(t)[0]; ev.Reason != "SidecarStopped" || !strings.Contains(ev.Message, "exit code 0") {
		t.Errorf("event %s: %q, want SidecarStopped with exit code 0", ev.Reason, ev.Message)
	}
	h.waitRecorded(t, "proxy")
	if _, err := os.Stat(filepath.Join(rt.stateDir, "sidecar-stops", "uid", "proxy")); err != nil {
		t.Errorf("no mark file: %v", err)
	}
}

// A container started before the agent has no start event: its PID comes from the
// runtime's task service.
func TestStopSignalsAProcessStartedBeforeTheAgent(t *testing.T) {
	rt := newFakeRuntime()
	pod := signalPod(rt, "SIGTERM", 5)
	rt.pids["proxy"] = 77
	sig := &fakeSignaller{rt: rt}
	h := startWith(t, setup{cfg: Config{Signaller: sig}}, rt, pod)
	rt.exit("main", 0, time.Now())
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
	if got := sig.calls(); len(got) != 1 || got[0] != (sent{77, "proxy", syscall.SIGTERM}) {
		t.Errorf("signals sent %v, want SIGTERM to proxy's process 77 once", got)
	}
}

// The process of a sidecar the agent signals is watched to its end, and the stop is
// measured to that end (sextant_sidecar_stop_process_seconds); the exit code, which only
// containerd tells, still comes from its event, and the stop is recorded once.
func TestSignalledSidecarsProcessEndIsMeasured(t *testing.T) {
	rt := newFakeRuntime()
	pod := signalPod(rt, "SIGTERM", 30)
	rt.pids["proxy"] = 77
	sig := &fakeSignaller{rt: rt, ignore: true}
	exits := &fakeExits{}
	h := startWith(t, setup{cfg: Config{Signaller: sig, Exits: exits}}, rt, pod)
	rt.exit("main", 0, time.Now())
	waitFor(t, "the signal", func() bool { return len(sig.calls()) == 1 })
	if pid := exits.pid("proxy"); pid != 77 {
		t.Fatalf("the sidecar's process watched at PID %d, want 77, before its signal", pid)
	}
	const later = 250 * time.Millisecond
	h.term.ProcessExited("proxy", time.Now().Add(later))
	if n := len(h.events(t)); n != 0 {
		t.Fatalf("%d Events before containerd's exit event, want none: the exit code is containerd's", n)
	}
	rt.exit("proxy", 3, time.Now())
	// The Event is created before the stop's metrics are; the stop's count is the last.
	waitFor(t, "the stop to be counted", func() bool {
		return testutil.ToFloat64(h.metrics.stops.WithLabelValues(resultStopped)) == 1
	})
	if ev := h.events(t)[0]; !strings.Contains(ev.Message, "exit code 3") {
		t.Errorf("event %q, want exit code 3 from containerd's event", ev.Message)
	}
	hist := histogramOf(t, h.reg, "sextant_sidecar_stop_process_seconds")
	if hist.GetSampleCount() != 1 || hist.GetSampleSum() < later.Seconds() || hist.GetSampleSum() > 60 {
		t.Errorf("sextant_sidecar_stop_process_seconds: %d samples summing to %.3fs, want one of at least %s (the process ended that long after the main's exit was heard)",
			hist.GetSampleCount(), hist.GetSampleSum(), later)
	}
	if ids, _ := rt.stopCalls(); len(ids) != 0 {
		t.Errorf("StopContainer calls %v, want none", ids)
	}
}

// A process that outlives its grace period is killed through the runtime, once.
func TestSignalledProcessOutlivingItsGraceIsKilled(t *testing.T) {
	rt := newFakeRuntime()
	rt.stopExit = 137
	pod := signalPod(rt, "SIGTERM", 2)
	rt.pids["proxy"] = 77
	sig := &fakeSignaller{rt: rt, ignore: true}
	h := startWith(t, setup{cfg: Config{Signaller: sig}}, rt, pod)
	signalled := time.Now()
	rt.exit("main", 0, signalled)
	waitFor(t, "the signal", func() bool { return len(sig.calls()) == 1 })
	// The grace period (2s) runs first: longer than waitFor waits.
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { return len(h.events(t)) == 1, nil }); err != nil {
		t.Fatal("the stop was never recorded")
	}
	ids, timeouts := rt.stopCalls()
	if len(ids) != 1 || ids[0] != "proxy" || timeouts[0] != 0 {
		t.Errorf("StopContainer calls %v with %v, want proxy once with no grace left (a kill)", ids, timeouts)
	}
	if len(sig.calls()) != 1 {
		t.Errorf("signals sent %v, want one", sig.calls())
	}
	if ev := h.events(t)[0]; !strings.Contains(ev.Message, "exit code 137") {
		t.Errorf("event %q, want exit code 137", ev.Message)
	}
}

// Where the agent cannot signal the process itself (the process is not the container's,
// no PID is known, or the stop signal is one it cannot name), the runtime stops the
// container with the whole grace period.
func TestStopFallsBackToTheRuntime(t *testing.T) {
	cases := map[string]struct {
		stopSignal string
		pid        uint32
		refuse     error
	}{
		"not the container's process": {"SIGTERM", 77, procsignal.ErrNotContainer},
		"no PID":                      {"SIGTERM", 0, nil},
		"unknown stop signal":         {"SIGRTMIN+3", 77, nil},
		"stop signal not recorded":    {"", 77, nil},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			rt := newFakeRuntime()
			pod := signalPod(rt, c.stopSignal, 5)
			if c.pid != 0 {
				rt.pids["proxy"] = c.pid
			}
			sig := &fakeSignaller{rt: rt, refuse: c.refuse}
			h := startWith(t, setup{cfg: Config{Signaller: sig}}, rt, pod)
			rt.exit("main", 0, time.Now())
			waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
			if got := sig.calls(); len(got) != 0 {
				t.Errorf("signals sent %v, want none", got)
			}
			if ids, timeouts := rt.stopCalls(); len(ids) != 1 || ids[0] != "proxy" || timeouts[0] != 5*time.Second {
				t.Errorf("StopContainer calls %v with %v, want proxy once with the 5s grace period", ids, timeouts)
			}
		})
	}
}

// The marks of a deleted pod go with it, and those of pods deleted while no agent ran
// go when the next one starts.
func TestMarksOfGonePodsAreRemoved(t *testing.T) {
	rt := newFakeRuntime()
	dir := t.TempDir()
	gone := filepath.Join(dir, "sidecar-stops", "uid-gone", "c1")
	if err := os.MkdirAll(filepath.Dir(gone), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gone, []byte("v2:c1:1:30"), 0o600); err != nil {
		t.Fatal(err)
	}
	pod := signalPod(rt, "SIGTERM", 5)
	h := startWith(t, setup{cfg: Config{StateDir: dir}}, rt, pod)
	waitFor(t, "the gone pod's marks removed", func() bool {
		_, err := os.Stat(filepath.Dir(gone))
		return errors.Is(err, os.ErrNotExist)
	})
	rt.exit("main", 0, time.Now())
	h.waitRecorded(t, "proxy")
	if err := h.kube.CoreV1().Pods("ns").Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted pod's marks removed", func() bool {
		_, err := os.Stat(filepath.Join(dir, "sidecar-stops", "uid"))
		return errors.Is(err, os.ErrNotExist)
	})
}

func TestMarkFilesRefuseOtherNames(t *testing.T) {
	m := markFiles{dir: t.TempDir()}
	for _, bad := range [][2]string{{"..", "c"}, {"uid", ".."}, {"u/id", "c"}, {"uid", "c/../../x"}, {"", "c"}, {"uid", ""}} {
		if err := m.write(bad[0], bad[1], "x"); err == nil {
			t.Errorf("write(%q, %q): no error", bad[0], bad[1])
		}
	}
	if got, err := m.read("uid", "c"); got != "" || err != nil {
		t.Errorf("read of no mark = %q, %v; want none", got, err)
	}
	if err := m.write("uid", "c", "v2:c:1:30"); err != nil {
		t.Fatal(err)
	}
	if got, err := m.read("uid", "c"); got != "v2:c:1:30" || err != nil {
		t.Errorf("read = %q, %v", got, err)
	}
}
