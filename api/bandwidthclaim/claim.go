// Package bandwidthclaim is the rule for how much of its bandwidth a bound pod claims
// while it has not started, which the ranker reserves by and the agent guarantees by:
// both must apply the same rule to the same pod status, or the ranker places pods whose
// guarantees the node does not keep.
//
// A pod bound to a node claims its expected (else required) rate there. One that has
// not started every container ReduceAfter after it was bound claims only its required
// rate; one that has not started ReleaseAfter after it was bound claims nothing, until
// it starts. A pod whose init container sleeps forever, or whose image never pulls,
// would otherwise hold the node's bandwidth for as long as its author likes.
package bandwidthclaim

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Deadlines are how long after it was bound a pod that has not started keeps its full
// claim (ReduceAfter) and its required rate (ReleaseAfter). Zero means never.
type Deadlines struct {
	ReduceAfter  time.Duration
	ReleaseAfter time.Duration
}

// DefaultDeadlines are the ranker's and the agent's defaults (and the chart's): long
// enough for a large image to pull, short enough that a stuck pod does not hold a node
// for longer than an operator would look at it.
var DefaultDeadlines = Deadlines{ReduceAfter: 2 * time.Minute, ReleaseAfter: 5 * time.Minute}

// Stage is how much a pod claims.
type Stage int

const (
	// Full: the expected (else required) rate.
	Full Stage = iota
	// RequiredOnly: the required rate; the pod has not started ReduceAfter after it was
	// bound.
	RequiredOnly
	// Released: nothing; the pod has not started ReleaseAfter after it was bound.
	Released
)

func (s Stage) String() string {
	switch s {
	case RequiredOnly:
		return "required-only"
	case Released:
		return "released"
	}
	return "full"
}

// StageAt is how much a pod bound at bound, started at started (zero: not yet), claims
// at now, and when that changes next without a new pod status (zero: never).
func (d Deadlines) StageAt(bound, started, now time.Time) (Stage, time.Time) {
	if !started.IsZero() || bound.IsZero() {
		return Full, time.Time{}
	}
	if d.ReleaseAfter > 0 && !now.Before(bound.Add(d.ReleaseAfter)) {
		return Released, time.Time{}
	}
	if d.ReduceAfter > 0 && !now.Before(bound.Add(d.ReduceAfter)) {
		return RequiredOnly, deadline(bound, d.ReleaseAfter)
	}
	if d.ReduceAfter > 0 {
		return Full, bound.Add(d.ReduceAfter)
	}
	return Full, deadline(bound, d.ReleaseAfter)
}

func deadline(bound time.Time, after time.Duration) time.Time {
	if after <= 0 {
		return time.Time{}
	}
	return bound.Add(after)
}

// Order is the time a node orders the pod's guarantee by among the others: when it was
// bound, or, for a pod that started only after it was released, when it started. Such
// a pod held nothing while pods bound after it were placed on what it gave up, so it
// comes after them.
func (d Deadlines) Order(bound, started time.Time) time.Time {
	if d.ReleaseAfter > 0 && !started.IsZero() && started.After(bound.Add(d.ReleaseAfter)) {
		return started
	}
	return bound
}

// Bound is when the pod was bound to its node: its PodScheduled condition's transition
// to true, which the scheduler that bound it sets, else its creation.
func Bound(pod *corev1.Pod) time.Time {
	bound := pod.CreationTimestamp.Time
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			bound = c.LastTransitionTime.Time
		}
	}
	return bound
}

// Started returns when every container of the running pod had started, or zero if one
// has not started yet. A container that ran and finished (a Never or OnFailure pod), or
// that crashed and waits to restart, has started: its traffic is in the node's reports
// as much as it will ever be.
func Started(pod *corev1.Pod) time.Time {
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) == 0 {
		return time.Time{}
	}
	var latest time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		var started time.Time
		switch {
		case cs.State.Running != nil:
			started = cs.State.Running.StartedAt.Time
		case cs.State.Terminated != nil:
			started = cs.State.Terminated.StartedAt.Time
		case cs.LastTerminationState.Terminated != nil:
			started = cs.LastTerminationState.Terminated.StartedAt.Time
		}
		if started.IsZero() {
			return time.Time{}
		}
		if started.After(latest) {
			latest = started
		}
	}
	return latest
}

// Running reports whether every container of the pod runs now: not waiting to start or
// restart, not exited.
func Running(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// Finished reports whether the pod has ended: its claims end with it.
func Finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
