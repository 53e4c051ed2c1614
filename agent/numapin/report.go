package numapin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sextant.io/sextant/agent/nodepods"
)

// event records an Event on the pod. Its name is derived from the pod and the kind of
// event, so an agent that restarts and decides the same again creates nothing new.
func (p *Pinner) event(ctx context.Context, pod *corev1.Pod, typ, reason, suffix, msg string) {
	now := metav1.NewTime(p.now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: nodepods.EventName(pod, suffix), Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace,
			Name: pod.Name, UID: pod.UID},
		Reason: reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: p.cfg.Component, Host: p.cfg.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "sextant.io/numa-pinning", ReportingInstance: p.cfg.Component + "-" + p.cfg.NodeName,
	}
	if err := nodepods.CreateEvent(ctx, p.kube, p.cfg.NodeName, ev, p.log); err != nil {
		p.log.Error(err, "could not record an event", "pod", pod.Namespace+"/"+pod.Name, "reason", reason)
	}
}
