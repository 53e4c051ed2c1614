package devices

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/plugins/binder"
)

// PreBindPreFlight skips PreBind when the Binding carries the picked devices
// (SextantBinder staged them in Reserve; it also overwrites any earlier value), or when
// Reserve picked no devices and the pod has no devices.sextant.io/allocated from an
// earlier attempt that must go. Its patch touches only its own annotation, so it may run
// in parallel with other PreBinds.
func (pl *DeviceAware) PreBindPreFlight(_ context.Context, state fwk.CycleState, p *v1.Pod, nodeName string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	alloc, picked := pick(state, nodeName)
	if picked && binder.Carries(state, annotations.DevicesAllocated, alloc.String()) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	_, stale := p.Annotations[annotations.DevicesAllocated]
	if !picked && !stale {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return &fwk.PreBindPreFlightResult{AllowParallel: true}, nil
}

// PreBind writes devices.sextant.io/allocated onto the pod before the Binding when no
// SextantBinder carries it on the Binding. It is the pod side of the device handshake: the node side reads it to hand over exactly these IDs.
// A value left by an earlier attempt is removed when no devices were picked this time.
func (pl *DeviceAware) PreBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	var value *string
	if alloc, ok := pick(state, nodeName); ok {
		v := alloc.String()
		value = &v
	} else if _, stale := pod.Annotations[annotations.DevicesAllocated]; !stale {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]*string{annotations.DevicesAllocated: value}},
	})
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("encode %s patch: %w", annotations.DevicesAllocated, err))
	}
	if _, err := pl.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fwk.AsStatus(fmt.Errorf("write %s on pod %s/%s: %w", annotations.DevicesAllocated, pod.Namespace, pod.Name, err))
	}
	return nil
}

func pick(state fwk.CycleState, node string) (annotations.Allocation, bool) {
	s, ok := readState(state)
	if !ok {
		return nil, false
	}
	return s.picks.get(node)
}
