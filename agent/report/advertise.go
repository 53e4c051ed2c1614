package report

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"sextant.io/sextant/api/v1alpha1"
)

// DeviceCounts counts the healthy devices of each advertised kind as extended resources.
func DeviceCounts(t v1alpha1.Topology) corev1.ResourceList {
	counts := map[v1alpha1.DeviceKind]int64{}
	for _, d := range t.PCIDevices {
		if d.Health == v1alpha1.Healthy {
			counts[d.Kind]++
		}
	}
	out := corev1.ResourceList{}
	// "other" (host bridges, DMA engines, USB controllers) is not something to hand to
	// a pod, so only the requestable kinds are advertised.
	for _, k := range v1alpha1.RequestableDeviceKinds {
		out[k.ResourceName()] = *resource.NewQuantity(counts[k], resource.DecimalSI)
	}
	return out
}

// advertise sets the node's capacity of the device resources to the healthy counts, so
// the scheduler's resource fit counts them; the kubelet carries capacity over into
// allocatable. It patches only when a count differs.
func advertise(ctx context.Context, kube kubernetes.Interface, nodeName string, want corev1.ResourceList) error {
	node, err := kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", nodeName, err)
	}
	changed := corev1.ResourceList{}
	for name, q := range want {
		if have, ok := node.Status.Capacity[name]; !ok || have.Cmp(q) != 0 {
			changed[name] = q
		}
	}
	if len(changed) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": changed}})
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().Nodes().PatchStatus(ctx, nodeName, patch); err != nil {
		return fmt.Errorf("advertise devices on node %s: %w", nodeName, err)
	}
	return nil
}
