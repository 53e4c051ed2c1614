package sidecar

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sextant.io/sextant/api/sidecarrules"
	"sextant.io/sextant/cri"
)

// twoContainers adds a running main and sidecar of pod uid to rt, each named as in
// jobPod, with IDs main-<uid> and proxy-<uid>.
func twoContainers(rt *fakeRuntime, uid string) {
	now := time.Now()
	rt.add(cri.Container{ID: "main-" + uid, PodUID: uid, Name: "main", State: cri.StateRunning, CreatedAt: now})
	rt.add(cri.Container{ID: "proxy-" + uid, PodUID: uid, Name: "proxy", State: cri.StateRunning, CreatedAt: now})
}

// noStopFor fails the test if any stop is asked for during d.
func noStopFor(t *testing.T, rt *fakeRuntime, d time.Duration, why string) {
	t.Helper()
	time.Sleep(d)
	if ids, _ := rt.stopCalls(); len(ids) != 0 {
		t.Fatalf("stopped %v %s", ids, why)
	}
}

// The kubelet starts a native sidecar again when it sees it exited while a main
// container runs, and it sees both through the CRI. So a native sidecar is stopped only
// once the CRI reports its main exited, which under a burst is long after containerd's
// exit event; the deletion of the main's task wakes the stop.
func TestNativeSidecarWaitsForTheRuntimesRecord(t *testing.T) {
	rt := newFakeRuntime()
	twoContainers(rt, "a")
	rt.unrecorded = map[string]bool{"main-a": true}
	h := start(t, rt, jobPod("job-a", "a", corev1.RestartPolicyNever))

	rt.exit("main-a", 0, time.Now())
	// The stop was decided before it is in flight, so the 100ms below all fall after
	// the decision. The event handler may ask the CRI about main-a too, before it.
	waitFor(t, "the stop of proxy-a to be in flight", func() bool { return h.term.stopping("proxy-a") })
	// The stop asks the CRI about the main, and is told it still runs.
	waitFor(t, "the stop to ask the runtime about main-a", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return slices.Contains(rt.statuses, "main-a")
	})
	noStopFor(t, rt, 100*time.Millisecond, "before the CRI recorded the main container's exit")

	rt.recordExit("main-a")
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
	if ids, _ := rt.stopCalls(); !slices.Equal(ids, []string{"proxy-a"}) {
		t.Errorf("StopContainer calls = %v, want proxy-a once", ids)
	}
	// The phases are observed after the Event is written.
	waitFor(t, "the phases to be observed", func() bool { return phaseSamples(t, h.reg, phaseConfirmed).count > 0 })
	if got := phaseSamples(t, h.reg, phaseConfirmed); got.count != 1 || got.sum < 0.1 {
		t.Errorf("phase confirmed: %d samples summing to %vs; want one of at least the 100ms the record took", got.count, got.sum)
	}
}

// A regular sidecar is not restarted by the kubelet under Never, or under OnFailure when
// every main exited 0: its stop does not wait for the CRI's record.
func TestRegularSidecarDoesNotWaitForTheRecord(t *testing.T) {
	rt := newFakeRuntime()
	twoContainers(rt, "a")
	rt.unrecorded = map[string]bool{"main-a": true}
	h := start(t, rt, regularSidecarPod("job-a", "a", corev1.RestartPolicyNever, nil))
	rt.exit("main-a", 0, time.Now())
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
}

// A main container the kubelet already reports terminated needs no word from the CRI.
func TestUnreportedExits(t *testing.T) {
	pod := jobPod("job-a", "a", corev1.RestartPolicyNever)
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "second"})
	latest := map[string]cri.Container{"main": {ID: "m1"}, "second": {ID: "m2"}, "proxy": {ID: "p"}}
	roles := rolesOf(t, pod)
	if got := unreportedExits(pod, "proxy", roles, latest); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("unreportedExits with no statuses = %v, want [m1 m2]", got)
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "main", ContainerID: "containerd://m1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}},
		{Name: "second", ContainerID: "containerd://m2", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
	}
	if got := unreportedExits(pod, "proxy", roles, latest); !slices.Equal(got, []string{"m2"}) {
		t.Errorf("unreportedExits with main reported terminated = %v, want [m2]", got)
	}
	// An earlier attempt's termination is not the latest attempt's.
	pod.Status.ContainerStatuses[0].ContainerID = "containerd://m0"
	if got := unreportedExits(pod, "proxy", roles, latest); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("unreportedExits with an older attempt reported = %v, want [m1 m2]", got)
	}
	regular := regularSidecarPod("job-b", "b", corev1.RestartPolicyNever, nil)
	if got := unreportedExits(regular, "proxy", rolesOf(t, regular), latest); got != nil {
		t.Errorf("unreportedExits for a regular sidecar = %v, want none", got)
	}
}

func rolesOf(t *testing.T, pod *corev1.Pod) sidecarrules.Roles {
	t.Helper()
	roles, ok := sidecarrules.PodRoles(pod)
	if !ok {
		t.Fatalf("pod %s has no roles", pod.Name)
	}
	return roles
}

// fakeExits stands for procsignal.Exits: it records what it is asked to watch.
type fakeExits struct {
	mu      sync.Mutex
	watched map[string]uint32
}

func (f *fakeExits) Watch(pid uint32, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watched == nil {
		f.watched = map[string]uint32{}
	}
	f.watched[id] = pid
	return nil
}

func (f *fakeExits) pid(id string) uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watched[id]
}

// With Config.Exits, a Never pod's running main containers are watched, and the exit of
// a main's process stops the sidecar without containerd's exit event. A pod under
// OnFailure is not watched: whether its sidecar stops depends on the exit code, which
// only containerd tells.
func TestProcessExitStopsTheSidecar(t *testing.T) {
	rt := newFakeRuntime()
	twoContainers(rt, "a")
	twoContainers(rt, "b")
	rt.pids["main-a"], rt.pids["main-b"] = 101, 102
	exits := &fakeExits{}
	h := startWith(t, setup{cfg: Config{Exits: exits}}, rt,
		regularSidecarPod("job-a", "a", corev1.RestartPolicyNever, nil),
		regularSidecarPod("job-b", "b", corev1.RestartPolicyOnFailure, nil))
	waitFor(t, "main-a to be watched", func() bool { return exits.pid("main-a") == 101 })

	h.term.ProcessExited("main-a", time.Now())
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
	if ids, _ := rt.stopCalls(); !slices.Equal(ids, []string{"proxy-a"}) {
		t.Errorf("StopContainer calls = %v, want proxy-a once", ids)
	}
	if pid := exits.pid("main-b"); pid != 0 {
		t.Errorf("the OnFailure pod's main was watched (PID %d)", pid)
	}
	// containerd's event, later, changes nothing.
	rt.exit("main-a", 0, time.Now())
	time.Sleep(100 * time.Millisecond)
	if ids, _ := rt.stopCalls(); len(ids) != 1 || len(h.events(t)) != 1 {
		t.Errorf("after containerd's exit event: stops %v and %d Events, want one of each", ids, len(h.events(t)))
	}
}

// A process's exit does not stop a native sidecar before the CRI records the main's
// exit either.
func TestProcessExitOfANativeSidecarsMainWaitsForTheRecord(t *testing.T) {
	rt := newFakeRuntime()
	twoContainers(rt, "a")
	rt.pids["main-a"] = 101
	exits := &fakeExits{}
	h := startWith(t, setup{cfg: Config{Exits: exits}}, rt, jobPod("job-a", "a", corev1.RestartPolicyNever))
	waitFor(t, "main-a to be watched", func() bool { return exits.pid("main-a") == 101 })

	h.term.ProcessExited("main-a", time.Now())
	noStopFor(t, rt, 100*time.Millisecond, "before the CRI recorded the main container's exit")
	rt.exit("main-a", 0, time.Now())
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
}

// Once the agent has read the records of every container the kubelet reports for a pod,
// it does not list containerd's containers for that pod again: under a burst of exits the
// list was most of the decision's time. A container the kubelet reports that the agent
// has not read makes it list again.
func TestReportedContainersAreNotListedAgain(t *testing.T) {
	rt := newFakeRuntime()
	twoContainers(rt, "a")
	pod := jobPod("job-a", "a", corev1.RestartPolicyNever)
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "proxy", ContainerID: "containerd://proxy-a",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://main-a",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	h := start(t, rt, pod)
	lists := func() int {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.lists
	}
	waitFor(t, "the first pass", func() bool { return lists() > 0 })
	before := lists()
	rt.exit("main-a", 0, time.Now())
	waitFor(t, "the stop to be recorded", func() bool { return len(h.events(t)) == 1 })
	if n := lists() - before; n != 0 {
		t.Errorf("containerd's containers listed %d times after the first pass, want none", n)
	}

	// The kubelet reports a container the agent has not read: the next pass lists.
	rt.add(cri.Container{ID: "proxy-a2", PodUID: "a", Name: "proxy", Attempt: 1, State: cri.StateRunning, CreatedAt: time.Now()})
	pod.Status.InitContainerStatuses[0].ContainerID = "containerd://proxy-a2"
	pod.Status.InitContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ContainerID: "containerd://proxy-a"}
	if _, err := h.kube.CoreV1().Pods("ns").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a pass over the new container", func() bool { return lists() > before })
}
