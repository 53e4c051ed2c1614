package bandwidth

import (
	"context"
	"fmt"
	"maps"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
)

// EventsToRegister lists the events that can make a pod this plugin rejected
// schedulable: a node's new report, a node joining, a bandwidth pod going away (its
// reservation is released), and the pod's own annotations being fixed. For the reports
// kube-scheduler watches NodeBandwidths itself (the ranker needs RBAC list/watch on
// them), trimmed to what isSchedulableAfterReport reads (heartbeat.EventTransform).
func (pl *BandwidthAware) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: heartbeat.BandwidthEvent, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: pl.isSchedulableAfterReport},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: isSchedulableAfterPodDeleted},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: isSchedulableAfterPodUpdated},
	}, nil
}

// isSchedulableAfterReport queues the pod when the reporting node now passes Filter.
func (pl *BandwidthAware) isSchedulableAfterReport(logger klog.Logger, pod *v1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	report, err := asNodeBandwidth(newObj)
	if err != nil {
		return fwk.Queue, err
	}
	req, ok := pl.request(nil, pod)
	if !ok || !req.HasRequired() {
		// Rejected for malformed annotations: a report does not fix those.
		return fwk.QueueSkip, nil
	}
	// Check against the event's object, without the reservations: a pod skipped here
	// waits for the next event, and reservations also end without one (Unreserve). A
	// needless requeue costs one attempt, in which Filter applies the ledger as usual.
	parsed := heartbeat.ParseBandwidth(report)
	// The report arrives now: kube-scheduler's informer delivers it at this event.
	parsed.Received = pl.now()
	if reason, _ := pl.check(req, parsed, 0, 0, pl.now(), false); reason != "" {
		logger.V(5).Info("NodeBandwidth update does not make the pod schedulable", "pod", klog.KObj(pod), "node", report.Name, "reason", reason)
		return fwk.QueueSkip, nil
	}
	// The pod is retried right away, and that attempt must see this report: the store
	// and the ledger are fed by another informer, whose handlers may not have run yet.
	// Without this the attempt could fail on the older report and the pod wait for
	// the node's next report, or for the unschedulable flush (5 minutes).
	pl.reports.Advance(parsed)
	pl.ledger.observeParsed(report.Name, parsed)
	return fwk.Queue, nil
}

func asNodeBandwidth(obj any) (*v1alpha1.NodeBandwidth, error) {
	switch o := obj.(type) {
	case *v1alpha1.NodeBandwidth:
		return o, nil
	case *unstructured.Unstructured:
		nbw := &v1alpha1.NodeBandwidth{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, nbw); err != nil {
			return nil, err
		}
		return nbw, nil
	}
	return nil, fmt.Errorf("NodeBandwidth event carries %T", obj)
}

// isSchedulableAfterPodDeleted queues the pod when a bound pod with a bandwidth
// reservation goes away.
func isSchedulableAfterPodDeleted(_ klog.Logger, _ *v1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	deleted, ok := oldObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, nil
	}
	if deleted.Spec.NodeName == "" || !annotations.HasBandwidth(deleted.Annotations) {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// isSchedulableAfterPodUpdated queues the pod when its own bandwidth annotations change.
func isSchedulableAfterPodUpdated(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldPod, ok1 := oldObj.(*v1.Pod)
	newPod, ok2 := newObj.(*v1.Pod)
	if !ok1 || !ok2 {
		return fwk.Queue, nil
	}
	if newPod.UID != pod.UID {
		return fwk.QueueSkip, nil
	}
	if maps.Equal(bandwidthAnnotations(oldPod.Annotations), bandwidthAnnotations(newPod.Annotations)) {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

func bandwidthAnnotations(all map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range all {
		if strings.HasPrefix(k, annotations.BandwidthPrefix) {
			out[k] = v
		}
	}
	return out
}
