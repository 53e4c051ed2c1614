package sidecarrules

import (
	"math"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	running := State{Phase: Running}
	ok := func(at time.Time) State { return State{Phase: Exited, FinishedAt: at} }
	failed := func(at time.Time, code int32) State { return State{Phase: Exited, ExitCode: code, FinishedAt: at} }
	one := Roles{Mains: []string{"main"}, Sidecars: []string{"proxy"}}
	two := Roles{Mains: []string{"a", "b"}, Sidecars: []string{"proxy", "logs"}}

	cases := []struct {
		name     string
		policy   corev1.RestartPolicy
		roles    Roles
		states   map[string]State
		wantStop []string
		wantLast time.Time
	}{
		{"never: main still running", corev1.RestartPolicyNever, one,
			map[string]State{"main": running, "proxy": running}, nil, time.Time{}},
		{"never: main not started", corev1.RestartPolicyNever, one,
			map[string]State{"proxy": running}, nil, time.Time{}},
		{"never: main exited 0", corev1.RestartPolicyNever, one,
			map[string]State{"main": ok(t0), "proxy": running}, []string{"proxy"}, t0},
		{"never: main exited 1", corev1.RestartPolicyNever, one,
			map[string]State{"main": failed(t0, 1), "proxy": running}, []string{"proxy"}, t0},
		{"never: sidecar already exited", corev1.RestartPolicyNever, one,
			map[string]State{"main": ok(t0), "proxy": failed(t0, 137)}, nil, t0},
		{"never: sidecar not started yet", corev1.RestartPolicyNever, one,
			map[string]State{"main": ok(t0), "proxy": {Phase: Waiting}}, nil, t0},
		{"never: one of two mains running", corev1.RestartPolicyNever, two,
			map[string]State{"a": ok(t0), "b": running, "proxy": running, "logs": running}, nil, time.Time{}},
		{"never: both mains done, last time wins", corev1.RestartPolicyNever, two,
			map[string]State{"a": ok(t0.Add(2 * time.Second)), "b": failed(t0, 2), "proxy": running, "logs": running},
			[]string{"proxy", "logs"}, t0.Add(2 * time.Second)},
		{"never: only the running sidecar of two", corev1.RestartPolicyNever, two,
			map[string]State{"a": ok(t0), "b": ok(t0), "proxy": ok(t0), "logs": running}, []string{"logs"}, t0},
		{"onfailure: main failed, will restart", corev1.RestartPolicyOnFailure, one,
			map[string]State{"main": failed(t0, 1), "proxy": running}, nil, time.Time{}},
		{"onfailure: main restarted and running", corev1.RestartPolicyOnFailure, one,
			map[string]State{"main": running, "proxy": running}, nil, time.Time{}},
		{"onfailure: main succeeded", corev1.RestartPolicyOnFailure, one,
			map[string]State{"main": ok(t0), "proxy": running}, []string{"proxy"}, t0},
		{"onfailure: one main 0, other failed", corev1.RestartPolicyOnFailure, two,
			map[string]State{"a": ok(t0), "b": failed(t0, 3), "proxy": running, "logs": running}, nil, time.Time{}},
		{"always: never", corev1.RestartPolicyAlways, one,
			map[string]State{"main": ok(t0), "proxy": running}, nil, time.Time{}},
		{"empty policy: never", "", one,
			map[string]State{"main": ok(t0), "proxy": running}, nil, time.Time{}},
		{"no mains: never", corev1.RestartPolicyNever, Roles{Sidecars: []string{"proxy"}},
			map[string]State{"proxy": running}, nil, time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.policy, c.roles, c.states)
			if !slices.Equal(d.Stop, c.wantStop) {
				t.Errorf("Stop = %v, want %v (why: %s)", d.Stop, c.wantStop, d.Why)
			}
			if len(c.wantStop) > 0 && !d.LastMainFinished.Equal(c.wantLast) {
				t.Errorf("LastMainFinished = %v, want %v", d.LastMainFinished, c.wantLast)
			}
			if d.Why == "" {
				t.Error("Why is empty")
			}
		})
	}
}

func TestPodRoles(t *testing.T) {
	marked := func(name, env string) corev1.Container {
		return corev1.Container{Name: name, Env: []corev1.EnvVar{{Name: env, Value: "true"}}}
	}
	native := marked("native", EnvSidecar)
	native.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	nativeUnmarked := corev1.Container{Name: "native-unmarked", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}
	falseValue := corev1.Container{Name: "false", Env: []corev1.EnvVar{{Name: EnvSidecar, Value: "false"}}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To[int64](7),
		InitContainers:                []corev1.Container{{Name: "init"}, native, nativeUnmarked},
		Containers:                    []corev1.Container{{Name: "main"}, marked("proxy", EnvSidecar), marked("kruise", EnvKruise), falseValue},
	}}
	r, ok := PodRoles(pod)
	if !ok {
		t.Fatal("PodRoles: not ok")
	}
	if want := []string{"main", "false"}; !slices.Equal(r.Mains, want) {
		t.Errorf("Mains = %v, want %v", r.Mains, want)
	}
	if want := []string{"native", "proxy", "kruise"}; !slices.Equal(r.Sidecars, want) {
		t.Errorf("Sidecars = %v, want %v", r.Sidecars, want)
	}
	if r.GracePeriod != 7*time.Second {
		t.Errorf("GracePeriod = %v, want 7s", r.GracePeriod)
	}

	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	if _, ok := PodRoles(pod); ok {
		t.Error("an Always pod is acted on")
	}
	pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	pod.Spec.TerminationGracePeriodSeconds = nil
	if r, ok := PodRoles(pod); !ok || r.GracePeriod != 30*time.Second {
		t.Errorf("OnFailure pod: ok %v, grace %v; want true, 30s default", ok, r.GracePeriod)
	}
	pod.Spec.Containers = []corev1.Container{{Name: "main"}}
	pod.Spec.InitContainers = nil
	if _, ok := PodRoles(pod); ok {
		t.Error("a pod without sidecars is acted on")
	}
}

// The grace period a stop is given: never less than the kubelet's 2 s (0 would be an
// outright SIGKILL), and a value beyond what a time.Duration holds clamped, not wrapped.
func TestPodRolesGracePeriod(t *testing.T) {
	cases := []struct {
		name    string
		seconds *int64
		lo, hi  time.Duration
	}{
		{"unset", nil, 30 * time.Second, 30 * time.Second},
		{"zero", ptr.To[int64](0), 2 * time.Second, 2 * time.Second},
		{"one", ptr.To[int64](1), 2 * time.Second, 2 * time.Second},
		{"two", ptr.To[int64](2), 2 * time.Second, 2 * time.Second},
		{"an hour", ptr.To[int64](3600), time.Hour, time.Hour},
		// Room for the terminator to double it and add a margin without overflow.
		{"beyond a time.Duration", ptr.To[int64](10_000_000_000), 50 * 365 * 24 * time.Hour, math.MaxInt64 / 4},
		{"the largest int64", ptr.To[int64](math.MaxInt64), 50 * 365 * 24 * time.Hour, math.MaxInt64 / 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				TerminationGracePeriodSeconds: c.seconds,
				Containers: []corev1.Container{{Name: "main"},
					{Name: "proxy", Env: []corev1.EnvVar{{Name: EnvSidecar, Value: "true"}}}},
			}}
			r, ok := PodRoles(pod)
			if !ok {
				t.Fatal("PodRoles: not ok")
			}
			if r.GracePeriod < c.lo || r.GracePeriod > c.hi || r.GracePeriod%time.Second != 0 {
				t.Errorf("GracePeriod = %v, want whole seconds in [%v, %v]", r.GracePeriod, c.lo, c.hi)
			}
		})
	}
}

func TestIsWrapped(t *testing.T) {
	cases := []struct {
		command []string
		want    bool
	}{
		{nil, false},
		{[]string{"/bin/proxy"}, false},
		{[]string{"/bin/sh", "-c", WrapperPath}, false},
		{[]string{WrapperPath}, true},
		{[]string{WrapperPath, "extra"}, true},
	}
	for _, c := range cases {
		if got := IsWrapped(&corev1.Container{Name: "proxy", Command: c.command}); got != c.want {
			t.Errorf("IsWrapped(command %q) = %v, want %v", c.command, got, c.want)
		}
	}
}
