package sidecar

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"sextant.io/sextant/agent/nodepods"
	"sextant.io/sextant/cri"
)

// idleTerminator is a Terminator that is not run: the test drives its passes and its
// exit stream itself.
func idleTerminator(t *testing.T, rt *fakeRuntime) *Terminator {
	t.Helper()
	kube := fake.NewClientset()
	term, err := New(Config{NodeName: node, StateDir: t.TempDir()}, kube, nodepods.NewInformer(kube, node), rt, nil, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return term
}

// A running container's state is asked of the runtime once while the exit stream that
// would report its exit is proven live, and again whenever that proof is lost or the
// kubelet contradicts it.
func TestRunningStateKeptWhileTheStreamIsLive(t *testing.T) {
	rt := newFakeRuntime()
	twoContainers(rt, "a")
	pod := jobPod("job-a", "a", corev1.RestartPolicyNever)
	roles := rolesOf(t, pod)
	term := idleTerminator(t, rt)
	pass := func() map[string]cri.Container {
		t.Helper()
		ctrs, err := term.podContainers(context.Background(), pod, roles)
		if err != nil {
			t.Fatal(err)
		}
		return latestAttempts(ctrs)
	}
	asked := func(step string, wantMain, wantProxy int) {
		t.Helper()
		if m, p := rt.statusCalls("main-a"), rt.statusCalls("proxy-a"); m != wantMain || p != wantProxy {
			t.Errorf("%s: runtime asked about main-a %d and proxy-a %d times, want %d and %d", step, m, p, wantMain, wantProxy)
		}
	}

	term.newStream()
	pass()
	pass()
	asked("before the stream delivered an event", 2, 2)

	term.streamProven()
	pass()
	got := pass()
	asked("with the stream proven", 3, 3)
	if got["proxy"].State != cri.StateRunning || got["main"].State != cri.StateRunning {
		t.Errorf("kept states: main %v, proxy %v; want both running", got["main"].State, got["proxy"].State)
	}

	term.newStream() // the stream broke: its exits may be lost
	pass()
	asked("after the stream broke", 4, 4)
	term.streamProven()
	pass()
	pass()
	asked("with the new stream proven", 5, 5)

	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://main-a",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}}
	pass()
	asked("with the kubelet reporting main-a terminated", 6, 5)

	term.noteExit(heardExit{TaskEvent: cri.TaskEvent{ContainerID: "proxy-a", ExitedAt: time.Now()}, heard: time.Now()})
	term.mu.Lock()
	_, kept := term.running["proxy-a"]
	term.mu.Unlock()
	if kept {
		t.Error("proxy-a is still kept running after its exit was heard")
	}
	if got := pass(); got["proxy"].State != cri.StateExited {
		t.Errorf("proxy state after its exit was heard: %v, want exited", got["proxy"].State)
	}
}

// An exit heard while the runtime answers that the container runs makes the answer
// stale: it is not kept.
func TestRunningStateNotKeptOverAnExitHeardMeanwhile(t *testing.T) {
	rt := newFakeRuntime()
	twoContainers(rt, "a")
	term := idleTerminator(t, rt)
	term.newStream()
	term.streamProven()
	rt.onStatus = func(id string) {
		term.noteExit(heardExit{TaskEvent: cri.TaskEvent{ContainerID: id, ExitedAt: time.Now()}, heard: time.Now()})
	}
	st, err := term.runningStatus(context.Background(), "main-a")
	if err != nil || st.State != cri.StateRunning {
		t.Fatalf("runningStatus = %v, %v; want the runtime's answer, running", st.State, err)
	}
	term.mu.Lock()
	defer term.mu.Unlock()
	if _, kept := term.running["main-a"]; kept {
		t.Error("main-a kept running although its exit was heard during the question")
	}
}

// A pass asks the runtime only about the pod's main and sidecar containers: the
// wrapper's installer, an init container long exited, decides nothing. Once the agent
// no longer held its exit, asking for its state again at a burst of finishing Jobs held
// up the pass that decided a stop for as long as containerd took to answer.
func TestPassAsksNothingAboutOtherContainers(t *testing.T) {
	rt := newFakeRuntime()
	twoContainers(rt, "a")
	rt.add(cri.Container{ID: "install-a", PodUID: "a", Name: "sextant-sidecar-install", State: cri.StateExited, CreatedAt: time.Now()})
	pod := jobPod("job-a", "a", corev1.RestartPolicyNever)
	pod.Spec.InitContainers = append([]corev1.Container{{Name: "sextant-sidecar-install"}}, pod.Spec.InitContainers...)
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{
		{Name: "sextant-sidecar-install", ContainerID: "containerd://install-a",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}},
		{Name: "proxy", ContainerID: "containerd://proxy-a"},
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://main-a"}}
	roles := rolesOf(t, pod)
	term := idleTerminator(t, rt)
	term.newStream()
	term.streamProven()
	for range 3 {
		ctrs, err := term.podContainers(context.Background(), pod, roles)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ctrs {
			if c.ID == "install-a" {
				t.Errorf("a pass returned the installer %s, which no rule reads", c.ID)
			}
		}
	}
	if n := rt.statusCalls("install-a"); n != 0 {
		t.Errorf("runtime asked about the installer %d times, want never", n)
	}
	if m, p := rt.statusCalls("main-a"), rt.statusCalls("proxy-a"); m != 1 || p != 1 {
		t.Errorf("runtime asked about main-a %d and proxy-a %d times, want once each (then kept running)", m, p)
	}
}
