package bandwidth

import (
	"context"
	"maps"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/bandwidthclaim"
	"sextant.io/sextant/ranker/heartbeat"
)

// EventsToRegister lists the events kube-scheduler watches that can make a pod this
// plugin rejected schedulable: a node joining, a bandwidth pod going away (its
// reservation is released), and the pod's own annotations being fixed. New reports come
// from the heartbeat store instead (reportArrived): kube-scheduler does not watch
// NodeBandwidth.
func (pl *BandwidthAware) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: isSchedulableAfterPodDeleted},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: isSchedulableAfterPodUpdated},
	}, nil
}

// reportArrived is the heartbeat store's listener: the ledger drops the reservations
// the report covers, then the waiting pods the report admits are activated. Both happen
// after the store holds the report, so the retry is checked against it.
func (pl *BandwidthAware) reportArrived(node string, report *heartbeat.Bandwidth) {
	if report == nil {
		return
	}
	pl.ledger.observeParsed(node, report)
	if pl.waiting == nil {
		return
	}
	now := pl.now()
	pl.waiting.Activate(klog.Background(), func(pod *v1.Pod) bool { return pl.admits(pod, report, now) })
}

// admits reports whether report alone (without the reservations) may pass the pod's
// Filter: a pod brought back needlessly costs one attempt, in which Filter applies the
// ledger as usual, while one left waiting would wait for the node's next report.
//
// A node outside the strict best-fit window admits the pod too: the window is also an
// upper bound, and the reservations left out here lower what the node has, which can
// bring it into the window.
func (pl *BandwidthAware) admits(pod *v1.Pod, report *heartbeat.Bandwidth, now time.Time) bool {
	req, ok := pl.request(nil, pod)
	if !ok || !req.Filtered() {
		return false // malformed annotations: no report fixes those
	}
	reason, _ := pl.check(req, report, networkReserved{}, now, false)
	return reason == "" || reason == reasonOutsideWindow
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

// isSchedulableAfterPodUpdated queues the pod when its own bandwidth annotations change,
// when a bound pod with bandwidth annotations finishes (its guarantee and its share of
// its namespace's quota end with it, and the node's reports count it no more), and when
// one stops running (another scheduler's pod reserves only while it runs).
func isSchedulableAfterPodUpdated(_ klog.Logger, pod *v1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldPod, ok1 := oldObj.(*v1.Pod)
	newPod, ok2 := newObj.(*v1.Pod)
	if !ok1 || !ok2 {
		return fwk.Queue, nil
	}
	if newPod.UID != pod.UID {
		if newPod.Spec.NodeName != "" && annotations.HasBandwidth(newPod.Annotations) &&
			(!bandwidthclaim.Finished(oldPod) && bandwidthclaim.Finished(newPod) ||
				bandwidthclaim.Running(oldPod) && !bandwidthclaim.Running(newPod)) {
			return fwk.Queue, nil
		}
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
