package numapin

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"sextant.io/sextant/agent/nodepods"
	"sextant.io/sextant/api/annotations"
)

// The reports of the pinner: what it counts, the Events it records and what it logs,
// kept apart from the cgroup writes they report on.

// reportNarrowed reports a narrowing of a pod's cgroup that repairs it: a confirmed pod
// is counted as repaired at once, a pod found narrowed by someone else is told why its
// set changed (and counted once confirmed).
func (p *Pinner) reportNarrowed(ctx context.Context, pod *corev1.Pod, st *podState) {
	if st.confirmed() {
		p.metrics.pins.WithLabelValues(pathRepair).Inc()
		p.log.Info("a pinned pod's cgroup had been widened; narrowed it again", "pod", keyOf(pod), "cpuset", st.want.String())
	} else if st.foreign != "" {
		p.event(ctx, pod, corev1.EventTypeWarning, "NUMAPinRepaired", "numa-repaired",
			fmt.Sprintf("The pod's cgroup held %s, not the set %s=%q means on this node (%s); narrowed it to that set", st.foreign, annotations.NUMANodes, st.value, st.want))
		p.log.Info("a pod's cgroup had been narrowed to another set than its NUMA nodes; narrowed it to theirs", "pod", keyOf(pod),
			"found", st.foreign, "cpuset", st.want.String())
	}
}

// reportConfirmed counts a pod that became pinned, with how and how long it took when
// this process pinned it.
func (p *Pinner) reportConfirmed(pod *corev1.Pod, st *podState) {
	if st.path != "" {
		took := st.narrowedAt.Sub(st.seen)
		p.metrics.pins.WithLabelValues(st.path).Inc()
		p.metrics.pinSeconds.WithLabelValues(st.path).Observe(max(took, 0).Seconds())
		// Recorded by the runtime worker: an API call here would delay the next pods' pins.
		// The event's name is the pod's: for a pod an earlier agent announced (most
		// repaired ones), nothing new is recorded.
		st.announce = fmt.Sprintf("Confined to NUMA nodes %s: %s (%s, %s after the pod was seen bound)", st.value, st.want, st.path, took.Round(time.Millisecond))
		p.log.Info("pinned a pod to its NUMA nodes", "pod", keyOf(pod), "numaNodes", st.value,
			"cpuset", st.want.String(), "path", st.path, "seconds", took.Seconds())
	}
	// After the pin's path is counted: whoever sees the pod pinned sees how.
	p.metrics.pinned.Inc()
}

// reportChanged says that a pinned pod's annotation changed to value, which is not
// followed.
func (p *Pinner) reportChanged(ctx context.Context, pod *corev1.Pod, st *podState, value string) {
	p.metrics.failures.WithLabelValues(reasonChanged).Inc()
	p.event(ctx, pod, corev1.EventTypeWarning, "NUMAAnnotationChanged", "numa-changed",
		fmt.Sprintf("%s changed from %q to %q after the pod was placed; the first decision stands (%s)", annotations.NUMANodes, st.value, value, st.want))
}

// refuse reports that a pod is not pinned, once per reason in a row.
func (p *Pinner) refuse(ctx context.Context, pod *corev1.Pod, st *podState, r *refusal) {
	if st.refused == r.reason {
		return
	}
	st.refused = r.reason
	p.metrics.failures.WithLabelValues(r.reason).Inc()
	if r.reason == reasonStaticCPUManager || r.reason == reasonStaticMemManager {
		return // said once for the node, in the log; an event per pod would be noise
	}
	p.event(ctx, pod, corev1.EventTypeWarning, "NUMAPinRefused", "numa-refused",
		fmt.Sprintf("Not confined to NUMA nodes %q: %s", pod.Annotations[annotations.NUMANodes], r.msg))
	p.log.Info("not pinning a pod to its NUMA nodes", "pod", keyOf(pod), "reason", r.reason, "detail", r.msg)
}

// failing records a Warning Event on a pod whose pinning keeps failing, once per pod:
// the failures counter says some pod is not confined, the Event says which and why.
func (p *Pinner) failing(ctx context.Context, key string, err error) {
	obj, exists, gerr := p.pods.GetStore().GetByKey(key)
	if gerr != nil || !exists {
		return
	}
	pod := obj.(*corev1.Pod)
	p.event(ctx, pod, corev1.EventTypeWarning, "NUMAPinFailing", "numa-failing",
		fmt.Sprintf("not confined to the NUMA nodes in %s after %d attempts: %v; retrying", annotations.NUMANodes, failingAfter, err))
}

// event records an Event on the pod. Its name is derived from the pod and the kind of
// event, so an agent that restarts and decides the same again creates nothing new.
func (p *Pinner) event(ctx context.Context, pod *corev1.Pod, typ, reason, suffix, msg string) {
	src := nodepods.Source{Node: p.cfg.NodeName, Component: p.cfg.Component, Controller: "sextant.io/numa-pinning"}
	ev := nodepods.NewPodEvent(src, pod, nodepods.PodEvent{Type: typ, Reason: reason, Suffix: suffix, Message: msg}, p.now())
	if err := nodepods.CreateEvent(ctx, p.kube, p.cfg.NodeName, ev, p.log); err != nil {
		p.log.Error(err, "could not record an event", "pod", keyOf(pod), "reason", reason)
	}
}
