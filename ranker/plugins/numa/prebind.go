package numa

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/plugins/binder"
)

// PreBindPreFlight skips PreBind when the Binding carries the choice (SextantBinder
// staged it in Reserve; it also overwrites any earlier value), or when there is neither a
// NUMA choice for the node nor a numa.sextant.io/nodes from an earlier attempt that must
// go. Its patch touches only its own annotation, so it may run in parallel with other
// PreBinds.
func (pl *NUMAAware) PreBindPreFlight(_ context.Context, state fwk.CycleState, p *v1.Pod, nodeName string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	nodes, chosen := ReservedNUMANodes(state, nodeName)
	if chosen && binder.Carries(state, annotations.NUMANodes, annotations.FormatNUMANodes(nodes)) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	_, stale := p.Annotations[annotations.NUMANodes]
	if !chosen && !stale {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return &fwk.PreBindPreFlightResult{AllowParallel: true}, nil
}

// PreBind writes numa.sextant.io/nodes onto the pod before the Binding when no
// SextantBinder carries it on the Binding, so the node side never sees the pod without it. A value left by an earlier attempt (written, then the
// binding failed) is removed when no NUMA choice was made this time, so it is never
// counted against NUMA nodes of the wrong node.
func (pl *NUMAAware) PreBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	var value *string
	if nodes, ok := ReservedNUMANodes(state, nodeName); ok {
		v := annotations.FormatNUMANodes(nodes)
		value = &v
	} else if _, stale := pod.Annotations[annotations.NUMANodes]; !stale {
		return nil
	}
	if err := patchAnnotation(ctx, pl.client, pod, annotations.NUMANodes, value); err != nil {
		return fwk.AsStatus(err)
	}
	return nil
}

// patchAnnotation sets one annotation on the pod (or removes it when value is nil) with
// a JSON merge patch, which leaves every other annotation alone.
func patchAnnotation(ctx context.Context, client kubernetes.Interface, pod *v1.Pod, key string, value *string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]*string{key: value}},
	})
	if err != nil {
		return fmt.Errorf("encode %s patch: %w", key, err)
	}
	if _, err := client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("write %s on pod %s/%s: %w", key, pod.Namespace, pod.Name, err)
	}
	return nil
}
