package deviceplugin

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCheckAllocation(t *testing.T) {
	p1 := mkPod("p1", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2))
	p2 := mkPod("p2", 1, "sextant.io/gpu="+devC+","+devD, ctr("main", 2))
	plain := mkPod("plain", 2, "", ctr("main", 2))
	nicOnly := mkPod("nic", 3, "sextant.io/nic="+devA, ctr("main", 2))
	running := with(mkPod("run", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2)), func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	})
	initOnly := with(mkPod("init-only", 4, "sextant.io/gpu="+devA+","+devB, ctr("main", 0)), func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{ctr("prep", 2)}
	})
	unreachable := func([]*corev1.Pod) ([]*corev1.Pod, bool) { return nil, false }
	tests := []struct {
		name      string
		pods      []*corev1.Pod
		ids       []string
		admitting AdmittingFunc
		refused   string // the pods named by the refusal, comma-separated; "" allowed
		unjudged  bool
		// identified: the kubelet's answer shows the pod being admitted among those judged.
		identified bool
	}{
		{name: "the annotated devices", pods: []*corev1.Pod{p1}, ids: []string{devB, devA}},
		{name: "other devices", pods: []*corev1.Pod{p1}, ids: []string{devA, devC}, refused: "p1"},
		{name: "other devices, the kubelet admits the pod", pods: []*corev1.Pod{p1, p2}, ids: []string{devA, devC},
			admitting: admits("p2"), refused: "p2", identified: true},
		{name: "one of two pods' devices, the kubelet admits the other", pods: []*corev1.Pod{p1, p2}, ids: []string{devA, devB},
			admitting: admits("p2"), refused: "p2", identified: true},
		{name: "the kubelet admits the pod given these devices", pods: []*corev1.Pod{p1, p2}, ids: []string{devA, devB},
			admitting: admits("p1"), identified: true},
		{name: "the kubelet keeps only a pod whose devices go to a plain init container: not identified",
			pods: []*corev1.Pod{initOnly}, ids: []string{devC, devD}, admitting: admits("init-only"), refused: "init-only"},
		{name: "one of two pods' devices, the kubelet cannot be asked", pods: []*corev1.Pod{p1, p2}, ids: []string{devA, devB},
			admitting: unreachable},
		{name: "mixed devices of two pods, neither's", pods: []*corev1.Pod{p2, p1}, ids: []string{devB, devC},
			admitting: unreachable, refused: "p1,p2"},
		{name: "a plain pod may be the one", pods: []*corev1.Pod{p1, plain}, ids: []string{devC, devD}},
		{name: "the kubelet admits the plain pod", pods: []*corev1.Pod{p1, plain}, ids: []string{devA, devB}, admitting: admits("plain"), identified: true},
		{name: "a decision for another resource only", pods: []*corev1.Pod{nicOnly}, ids: []string{devC, devD}},
		{name: "a part of the pod's devices, for one of its containers",
			pods: []*corev1.Pod{mkPod("two", 0, "sextant.io/gpu="+devA+","+devC, ctr("a", 1), ctr("b", 1))}, ids: []string{devC}},
		{name: "another size: not this pod's container", pods: []*corev1.Pod{p1}, ids: []string{devC}, unjudged: true},
		{name: "started containers have their devices", pods: []*corev1.Pod{running}, ids: []string{devC, devD}, unjudged: true},
		{name: "deleted pods are not admitted", unjudged: true, ids: []string{devC, devD},
			pods: []*corev1.Pod{with(mkPod("del", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2)), func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now })}},
		{name: "the kubelet admits none of the node's pods the agent knows", pods: []*corev1.Pod{p1}, ids: []string{devC, devD},
			admitting: admits(), unjudged: true},
		{name: "no pods", ids: []string{devA}, unjudged: true},
		{name: "a malformed annotation holds nothing", ids: []string{devC, devD},
			pods: []*corev1.Pod{with(mkPod("bad", 0, "", ctr("main", 2)), func(p *corev1.Pod) {
				p.Annotations = map[string]string{"devices.sextant.io/allocated": "not json"}
			})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mismatch, judged, identified := CheckAllocation(tt.pods, gpuRes, tt.ids, tt.admitting)
			if judged == tt.unjudged {
				t.Errorf("judged = %v, want %v", judged, !tt.unjudged)
			}
			if identified != tt.identified {
				t.Errorf("identified = %v, want %v", identified, tt.identified)
			}
			var refused []string
			if mismatch != nil {
				for _, p := range mismatch.Pods {
					refused = append(refused, p.Name)
				}
			}
			if got := strings.Join(refused, ","); got != tt.refused {
				t.Errorf("refused for %q, want %q (%v)", got, tt.refused, mismatch)
			}
		})
	}
}

func TestMismatchError(t *testing.T) {
	m := &Mismatch{Resource: gpuRes, IDs: []string{devC, devD}, Pods: []*corev1.Pod{mkPod("p1", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2))}}
	want := "the kubelet allocates sextant.io/gpu 0000:af:00.0,0000:b0:00.0, but the ranker chose other devices in devices.sextant.io/allocated of pod default/p1 (0000:3b:00.0,0000:3c:00.0)"
	if got := m.Error(); !strings.HasPrefix(got, want) {
		t.Errorf("error = %q, want it to start with %q", got, want)
	}
}
