package nodepods

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func TestByContainerID(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"},
		Spec:       corev1.PodSpec{NodeName: "n"},
		Status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "proxy", ContainerID: "containerd://proxy-2",
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ContainerID: "containerd://proxy-1"}}}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://main-1"}, {Name: "waiting"}},
		},
	}
	inf := NewInformer(fake.NewClientset(pod), "n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	for _, id := range []string{"proxy-2", "proxy-1", "main-1"} {
		if got, ok := ByContainerID(inf, id); !ok || got.UID != pod.UID {
			t.Errorf("ByContainerID(%q) = %v, %v; want pod p", id, got, ok)
		}
	}
	// No scheme-less or empty IDs: a container not yet created has none.
	for _, id := range []string{"", "containerd://main-1", "other"} {
		if got, ok := ByContainerID(inf, id); ok {
			t.Errorf("ByContainerID(%q) = %s, want none", id, got.Name)
		}
	}
}
