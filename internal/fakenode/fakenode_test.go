package fakenode

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestCreatePostsReadyAndLease(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
	node, err := Create(ctx, client, metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "1"}}, capacity)
	if err != nil {
		t.Fatal(err)
	}
	if c := node.Status.Conditions; len(c) != 1 || c[0].Type != corev1.NodeReady || c[0].Status != corev1.ConditionTrue {
		t.Errorf("conditions = %+v, want Ready=True", c)
	}
	if got := node.Status.Allocatable[corev1.ResourceCPU]; got.Cmp(resource.MustParse("8")) != 0 {
		t.Errorf("allocatable cpu = %v, want 8", got)
	}
	lease, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no lease: %v", err)
	}
	if lease.Spec.RenewTime == nil || time.Since(lease.Spec.RenewTime.Time) > time.Minute {
		t.Errorf("lease renew time = %v, want now", lease.Spec.RenewTime)
	}
	if refs := lease.OwnerReferences; len(refs) != 1 || refs[0].Name != "n1" {
		t.Errorf("lease owners = %+v, want node n1", refs)
	}

	// A second Create (a restarted demo) reuses the node and merges labels.
	again, err := Create(ctx, client, metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"b": "2"}}, capacity)
	if err != nil {
		t.Fatal(err)
	}
	if again.Labels["a"] != "1" || again.Labels["b"] != "2" {
		t.Errorf("labels = %v, want a=1 and b=2", again.Labels)
	}
}
