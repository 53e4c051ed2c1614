package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The device audit runs when a container starts (or starts again), and only then.
func TestContainerStarted(t *testing.T) {
	at := func(sec int64) metav1.Time { return metav1.NewTime(time.Unix(sec, 0)) }
	pod := func(init, main []corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: init, ContainerStatuses: main}}
	}
	running := func(name string, sec int64) corev1.ContainerStatus {
		started := at(sec)
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}
	}
	waiting := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	}
	for _, tc := range []struct {
		name     string
		old, new *corev1.Pod
		want     bool
	}{
		{"nothing runs", pod(nil, []corev1.ContainerStatus{waiting("main")}), pod(nil, []corev1.ContainerStatus{waiting("main")}), false},
		{"main starts", pod(nil, []corev1.ContainerStatus{waiting("main")}), pod(nil, []corev1.ContainerStatus{running("main", 10)}), true},
		{"an init container starts", pod([]corev1.ContainerStatus{waiting("init")}, nil), pod([]corev1.ContainerStatus{running("init", 10)}, nil), true},
		{"still running", pod(nil, []corev1.ContainerStatus{running("main", 10)}), pod(nil, []corev1.ContainerStatus{running("main", 10)}), false},
		{"restarted", pod(nil, []corev1.ContainerStatus{running("main", 10)}), pod(nil, []corev1.ContainerStatus{running("main", 20)}), true},
		{"stops", pod(nil, []corev1.ContainerStatus{running("main", 10)}), pod(nil, []corev1.ContainerStatus{waiting("main")}), false},
		{"a second one starts", pod(nil, []corev1.ContainerStatus{running("a", 10), waiting("b")}), pod(nil, []corev1.ContainerStatus{running("a", 10), running("b", 11)}), true},
	} {
		if got := containerStarted(tc.old, tc.new); got != tc.want {
			t.Errorf("%s: containerStarted = %v, want %v", tc.name, got, tc.want)
		}
	}
	if n := runningContainers(pod([]corev1.ContainerStatus{running("init", 1)}, []corev1.ContainerStatus{running("main", 2), waiting("b")})); n != 2 {
		t.Errorf("runningContainers = %d, want 2", n)
	}
}
