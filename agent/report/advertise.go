package report

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"sextant.io/sextant/api/v1alpha1"
)

// RemoveStaleDeviceCapacity removes from the node's capacity and allocatable the
// sextant.io/<kind> entries that no device plugin registered with the kubelet serves
// (served(resource) false): agents before the device plugin patched the healthy counts
// there themselves, and the kubelet never removes an extended resource it does not
// manage, so they would stay, counting devices nothing hands out. Entries the kubelet
// manages are left to it. It patches only when there is something to remove.
func RemoveStaleDeviceCapacity(ctx context.Context, kube kubernetes.Interface, nodeName string, served func(resource string) bool) ([]string, error) {
	node, err := kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", nodeName, err)
	}
	stale := map[string]any{}
	var names []string
	for _, list := range []map[string]bool{keys(node.Status.Capacity), keys(node.Status.Allocatable)} {
		for name := range list {
			if !strings.HasPrefix(name, v1alpha1.ResourcePrefix) || served(name) {
				continue
			}
			if _, seen := stale[name]; !seen {
				names = append(names, name)
			}
			stale[name] = nil
		}
	}
	if len(stale) == 0 {
		return nil, nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": stale, "allocatable": stale}})
	if err != nil {
		return nil, err
	}
	if _, err := kube.CoreV1().Nodes().PatchStatus(ctx, nodeName, patch); err != nil {
		return nil, fmt.Errorf("remove stale device capacity of node %s: %w", nodeName, err)
	}
	return names, nil
}

func keys(m corev1.ResourceList) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[string(k)] = true
	}
	return out
}
