package numahint

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

func TestPodUpdateHint(t *testing.T) {
	pending := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending", UID: types.UID("pending"),
		Annotations: map[string]string{"numa.sextant.io/policy": "single"}}}
	fixed := pending.DeepCopy()
	fixed.Annotations["numa.sextant.io/policy"] = "single-numa-node"
	running := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", UID: types.UID("other")},
		Spec: v1.PodSpec{NodeName: "n"}, Status: v1.PodStatus{Phase: v1.PodRunning}}
	done := running.DeepCopy()
	done.Status.Phase = v1.PodSucceeded
	relabeled := running.DeepCopy()
	relabeled.Labels = map[string]string{"a": "b"}
	for _, tc := range []struct {
		name     string
		old, new *v1.Pod
		want     fwk.QueueingHint
	}{
		{name: "the pod itself fixed", old: pending, new: fixed, want: fwk.Queue},
		{name: "a pod on a node finished", old: running, new: done, want: fwk.Queue},
		{name: "a finished pod updated again", old: done, new: done, want: fwk.QueueSkip},
		{name: "unrelated update", old: running, new: relabeled, want: fwk.QueueSkip},
	} {
		got, err := PodUpdateHint(klog.Background(), pending, tc.old, tc.new)
		if err != nil || got != tc.want {
			t.Errorf("%s: hint = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}
