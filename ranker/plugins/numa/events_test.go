package numa

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
)

func TestPodUpdateHint(t *testing.T) {
	pending := pod("pending", "1", gi, map[string]string{annotations.NUMAPolicy: "single"})
	fixed := pending.DeepCopy()
	fixed.Annotations[annotations.NUMAPolicy] = "single-numa-node"
	running := on("n", pod("other", "1", gi, nil))
	running.Status.Phase = v1.PodRunning
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
		{name: "unrelated update", old: running, new: relabeled, want: fwk.QueueSkip},
	} {
		got, err := PodUpdateHint(klog.Background(), pending, tc.old, tc.new)
		if err != nil || got != tc.want {
			t.Errorf("%s: hint = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

func TestSignPod(t *testing.T) {
	pl := NewWith(nil, nil)
	a, st := pl.SignPod(context.Background(), pod("a", "1", gi, nil))
	b, _ := pl.SignPod(context.Background(), pod("b", "1", gi, nil))
	if !st.IsSuccess() || len(a) != 1 || a[0].Value != b[0].Value {
		t.Errorf("equal pods signed %v and %v (%v)", a, b, st)
	}
	if _, st := pl.SignPod(context.Background(), pod("c", "1", gi, map[string]string{annotations.NUMAPolicy: "x"})); st.Code() != fwk.Unschedulable {
		t.Errorf("malformed policy signed: %v", st)
	}
}
