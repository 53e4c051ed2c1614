// Package sidecarrules says which containers of a pod are sidecars and when they are to be
// stopped, as pure functions shared by the node agent (agent/sidecar), the admission
// webhook and the virtual-node controller (ranker/).
//
// A container is a sidecar if it has env SEXTANT_SIDECAR=true, or
// KRUISE_TERMINATE_SIDECAR_WHEN_JOB_EXIT=true for pods written for OpenKruise; it may be a regular container or a native sidecar (an init
// container with restartPolicy: Always, which is what the webhook turns it into). Every
// other regular container is a main container. With restartPolicy Never, once every
// main container has exited the sidecars are stopped; with OnFailure, once every main
// container has exited 0; Always pods are never touched.
package sidecarrules

import (
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The env variables that mark a container as a sidecar, with the value "true".
const (
	EnvSidecar = "SEXTANT_SIDECAR"
	EnvKruise  = "KRUISE_TERMINATE_SIDECAR_WHEN_JOB_EXIT"
)

// IsSidecar reports whether the container carries a sidecar marker.
func IsSidecar(c *corev1.Container) bool {
	for _, e := range c.Env {
		if (e.Name == EnvSidecar || e.Name == EnvKruise) && e.ValueFrom == nil &&
			strings.EqualFold(strings.TrimSpace(e.Value), "true") {
			return true
		}
	}
	return false
}

// The wrapper's place in a sidecar the webhook prepared: its emptyDir is mounted at
// WrapperDir and the container's command is WrapperPath. The webhook writes them and the
// agent reads them (IsWrapped), so they live here rather than in either.
const (
	WrapperDir  = "/.sextant"
	WrapperPath = WrapperDir + "/sextant-sidecar-wrapper"
)

// IsWrapped reports whether the container runs under sextant-sidecar-wrapper, which
// turns a stop into exit 0 whatever its command does with the signal.
func IsWrapped(c *corev1.Container) bool {
	return len(c.Command) > 0 && c.Command[0] == WrapperPath
}

// The bounds of the grace period a sidecar is stopped with.
const (
	// MinGracePeriod is the kubelet's minimumGracePeriodInSeconds: it never stops a
	// container with less, and containerd turns a stop timeout of 0 into an outright
	// SIGKILL, whose 137 the wrapper cannot turn into 0.
	MinGracePeriod = 2 * time.Second
	// MaxGracePeriod is a quarter of what a time.Duration holds, in whole seconds: the
	// API takes any int64 for terminationGracePeriodSeconds, and a deadline built from
	// the grace period (twice it and a margin) must not overflow either.
	MaxGracePeriod = time.Duration(math.MaxInt64/4/int64(time.Second)) * time.Second
)

// IsNativeSidecar reports whether an init container is restartable, i.e. runs beside
// the main containers for the pod's life.
func IsNativeSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// Roles names the containers of a pod the rules care about.
type Roles struct {
	// Mains are the regular containers without a sidecar marker.
	Mains []string
	// Sidecars are the marked containers: regular ones and native sidecars.
	Sidecars []string
	// GracePeriod is the pod's terminationGracePeriodSeconds (default 30s), within
	// [MinGracePeriod, MaxGracePeriod].
	GracePeriod time.Duration
}

// PodRoles sorts the pod's containers into mains and sidecars. A pod the rules never
// act on (restartPolicy Always, no sidecar, or nothing but sidecars) has ok false.
func PodRoles(pod *corev1.Pod) (r Roles, ok bool) {
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever && pod.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return Roles{}, false
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if IsNativeSidecar(c) && IsSidecar(c) {
			r.Sidecars = append(r.Sidecars, c.Name)
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if IsSidecar(c) {
			r.Sidecars = append(r.Sidecars, c.Name)
		} else {
			r.Mains = append(r.Mains, c.Name)
		}
	}
	r.GracePeriod = 30 * time.Second
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil && *g >= 0 {
		// Compared in seconds: time.Duration(*g) * time.Second wraps negative from
		// about 292 years on.
		r.GracePeriod = time.Duration(min(*g, int64(MaxGracePeriod/time.Second))) * time.Second
		r.GracePeriod = max(r.GracePeriod, MinGracePeriod)
	}
	return r, len(r.Mains) > 0 && len(r.Sidecars) > 0
}

// Phase is where the latest attempt of a container is.
type Phase int

const (
	// Waiting: not started yet, or its state is unknown.
	Waiting Phase = iota
	Running
	Exited
)

// State is the latest attempt of one container.
type State struct {
	Phase      Phase
	ExitCode   int32
	FinishedAt time.Time
}

// Decision is what the rules say about a pod now.
type Decision struct {
	// Stop lists the sidecars to stop: those running now, in the order of Roles.Sidecars.
	Stop []string
	// LastMainFinished is when the last main container finished, set when Stop may be
	// non-empty.
	LastMainFinished time.Time
	// Why says, in a few words, why nothing (more) is stopped, or why the sidecars are.
	Why string
}

// Decide applies these rules to the current state of a pod's containers. states
// has an entry for each container the runtime knows; a missing one is Waiting. It is
// a pure function: the same inputs give the same decision, so an agent that restarts
// decides again from what is, not from what it remembers.
func Decide(policy corev1.RestartPolicy, roles Roles, states map[string]State) Decision {
	if policy != corev1.RestartPolicyNever && policy != corev1.RestartPolicyOnFailure {
		return Decision{Why: "restartPolicy " + string(policy) + ": sidecars are never stopped"}
	}
	if len(roles.Mains) == 0 || len(roles.Sidecars) == 0 {
		return Decision{Why: "no main container or no sidecar"}
	}
	var last time.Time
	for _, m := range roles.Mains {
		s := states[m]
		if s.Phase != Exited {
			return Decision{Why: "main container " + m + " has not exited"}
		}
		if policy == corev1.RestartPolicyOnFailure && s.ExitCode != 0 {
			return Decision{Why: "main container " + m + " failed and will be restarted (OnFailure)"}
		}
		if s.FinishedAt.After(last) {
			last = s.FinishedAt
		}
	}
	d := Decision{LastMainFinished: last, Why: "every main container exited"}
	if policy == corev1.RestartPolicyOnFailure {
		d.Why = "every main container exited 0"
	}
	for _, sc := range roles.Sidecars {
		if states[sc].Phase == Running {
			d.Stop = append(d.Stop, sc)
		}
	}
	return d
}

// StatusStates reads the states of the pod's containers from its status, as the kubelet
// (or virtual-kubelet) reported them.
func StatusStates(pod *corev1.Pod) map[string]State {
	states := map[string]State{}
	add := func(list []corev1.ContainerStatus) {
		for _, cs := range list {
			switch {
			case cs.State.Running != nil:
				states[cs.Name] = State{Phase: Running}
			case cs.State.Terminated != nil:
				states[cs.Name] = State{Phase: Exited, ExitCode: cs.State.Terminated.ExitCode,
					FinishedAt: cs.State.Terminated.FinishedAt.Time}
			default:
				states[cs.Name] = State{Phase: Waiting}
			}
		}
	}
	add(pod.Status.InitContainerStatuses)
	add(pod.Status.ContainerStatuses)
	return states
}
