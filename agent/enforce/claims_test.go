package enforce

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/bandwidthclaim"
)

// claimPod is a pod bound at bound with an egress requirement; started zero: its init
// container never ends.
func claimPod(uid string, bound, started time.Time, required string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid),
		Annotations: map[string]string{annotations.EgressRequired: required}}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(bound)}}
	p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0." + uid}}
	p.Status.Phase = corev1.PodPending
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
	if !started.IsZero() {
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}
	}
	return p
}

// The node applies the ranker's rule for pods that do not start (bandwidthclaim): one
// not started notStartedReleaseAfter after it was bound holds no guarantee, so the pod
// the ranker placed in its stead gets one; when it starts at last it comes after that
// pod.
func TestNotStartedPodsLoseTheirGuarantee(t *testing.T) {
	deadlines := bandwidthclaim.Deadlines{ReleaseAfter: 5 * time.Minute}
	network := []Network{{Name: "pod", Interfaces: []Interface{{Name: "eth0", Capacity: gbit(0.5)}}}}
	guaranteed := func(now time.Time, pods ...*corev1.Pod) map[types.UID]int64 {
		var in []Pod
		for _, p := range pods {
			pp, err, ok := podOf(p, nil, deadlines, now)
			if err != nil || !ok {
				t.Fatalf("podOf(%s): %v %v", p.Name, err, ok)
			}
			in = append(in, pp)
		}
		plan := MakePlan(network, in, DefaultShares, sequentialMinors{})
		out := map[types.UID]int64{}
		for uid, g := range plan.Networks[0].Guarantees {
			out[uid] = g[Egress]
		}
		return out
	}
	stuck := claimPod("1", t0, time.Time{}, "400M")
	if got := guaranteed(t0.Add(time.Minute), stuck); got["1"] != 400e6 {
		t.Errorf("a minute after binding: %v, want the stuck pod's 400M guaranteed", got)
	}
	placed := claimPod("2", t0.Add(6*time.Minute), t0.Add(6*time.Minute), "300M")
	if got := guaranteed(t0.Add(6*time.Minute), stuck, placed); got["1"] != 0 || got["2"] != 300e6 {
		t.Errorf("after the stuck pod's release: %v, want only the new pod's 300M", got)
	}
	late := claimPod("1", t0, t0.Add(7*time.Minute), "400M")
	if got := guaranteed(t0.Add(7*time.Minute), late, placed); got["1"] != 0 || got["2"] != 300e6 {
		t.Errorf("once the late pod started: %v, want the pod placed meanwhile kept first, the late one short", got)
	}
	if got := guaranteed(t0.Add(7*time.Minute), claimPod("3", t0, t0.Add(4*time.Minute), "400M"), placed); got["3"] != 400e6 || got["2"] != 0 {
		t.Errorf("a pod that started before its release keeps its place: %v", got)
	}
}
