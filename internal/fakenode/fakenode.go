// Package fakenode makes Node objects with no kubelet behind them look like live nodes:
// it posts a Ready condition with the given capacity and renews the node's Lease, as a
// kubelet does, so the node lifecycle controller neither marks them NotReady nor taints
// them unreachable. Tests and the multi-node demo use them as scheduling targets whose
// agent, if any, runs elsewhere (in a network namespace of its own).
package fakenode

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// LeaseDuration is the lease duration posted; Keep renews at a third of it.
const LeaseDuration = 40 * time.Second

// Create creates the node (meta.Name, or meta.GenerateName) with the given capacity and
// posts it Ready. An existing node of that name is reused, its labels merged and its
// status overwritten, so that a restarted demo picks its nodes up again.
func Create(ctx context.Context, client kubernetes.Interface, meta metav1.ObjectMeta, capacity corev1.ResourceList) (*corev1.Node, error) {
	nodes := client.CoreV1().Nodes()
	node, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: meta}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) && meta.Name != "" {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			existing, err := nodes.Get(ctx, meta.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if existing.Labels == nil {
				existing.Labels = map[string]string{}
			}
			for k, v := range meta.Labels {
				existing.Labels[k] = v
			}
			node, err = nodes.Update(ctx, existing, metav1.UpdateOptions{})
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("create node %s%s: %w", meta.Name, meta.GenerateName, err)
	}
	name := node.Name
	now := metav1.Now()
	status := corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "FakeKubelet",
			Message: "no kubelet: a sextant test or demo keeps this node's lease", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}
	// The node lifecycle controller may taint the new node meanwhile: retry on conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		latest, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		latest.Status = status
		updated, err := nodes.UpdateStatus(ctx, latest, metav1.UpdateOptions{})
		if err == nil {
			node = updated
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("post node %s ready: %w", name, err)
	}
	if err := renew(ctx, client, node); err != nil {
		return nil, err
	}
	return node, nil
}

// Keep renews the node's Lease until ctx ends. Failed renewals are retried at the next
// tick; a deleted node ends the loop.
func Keep(ctx context.Context, client kubernetes.Interface, node *corev1.Node) {
	tick := time.NewTicker(LeaseDuration / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := renew(ctx, client, node); apierrors.IsNotFound(err) {
			if _, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
		}
	}
}

// renew creates or renews the node's Lease in kube-node-lease, owned by the node so it
// goes away with it.
func renew(ctx context.Context, client kubernetes.Interface, node *corev1.Node) error {
	leases := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := &metav1.MicroTime{Time: time.Now()}
	lease, err := leases.Get(ctx, node.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: node.Name, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node.Name),
				LeaseDurationSeconds: ptr.To(int32(LeaseDuration / time.Second)), RenewTime: now},
		}, metav1.CreateOptions{})
	} else if err == nil {
		lease.Spec.RenewTime = now
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("renew lease of node %s: %w", node.Name, err)
	}
	return nil
}
