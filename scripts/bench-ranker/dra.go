package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The DRA shape's driver, DeviceClass and exclusion: the agent's own (agent/dra, and
// the NodeTopology exclusion of a device it serves through DRA).
const (
	draDriver   = "sextant.io"
	draClass    = "bench-gpu.sextant.io"
	draExcluded = "served through DRA (driver sextant.io): claims get it, the device plugin does not"
)

// draDeviceName is the agent's DRA name of GPU addr.
func draDeviceName(addr string) string {
	return "gpu-" + strings.NewReplacer(":", "-", ".", "-").Replace(addr)
}

// resourceSlice is node's pool of the shape's GPUs as the agent publishes it.
func resourceSlice(node, runID string, shape nodeShape) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + draDriver, Labels: map[string]string{labelBench: runID}},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: draDriver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		},
	}
	for i, a := range shape.gpuAddrs {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: draDeviceName(a), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"resource.kubernetes.io/pciBusID": {StringValue: ptr.To(a)},
			"resource.kubernetes.io/numaNode": {IntValue: ptr.To(int64(shape.gpuNUMA(i)))},
			"kind":                            {StringValue: ptr.To("gpu")},
		}})
	}
	return s
}

// createDeviceClass makes the DeviceClass the DRA shape's claims ask for.
func (b *bench) createDeviceClass(ctx context.Context) error {
	dc := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: draClass, Labels: map[string]string{labelBench: b.runID}},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].kind == \"gpu\"", draDriver, draDriver),
		}}}},
	}
	if _, err := b.kube.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create DeviceClass %s: %w", draClass, err)
	}
	return nil
}

// claimName is the ResourceClaim of pod i of sched.
func claimName(sched string, i int) string { return fmt.Sprintf("%s-%05d-gpu", sched, i) }

// createClaims makes the ResourceClaims of sched's GPU pods, before the run's clock
// starts: claims are the workload's input, as the pods' specs are.
func (b *bench) createClaims(ctx context.Context, sched string) error {
	var gpuPods []int
	for i, p := range b.workload {
		if p.gpus > 0 {
			gpuPods = append(gpuPods, i)
		}
	}
	logf("%s nodes, %s: creating %d ResourceClaims", b.label(), sched, len(gpuPods))
	return b.parallel(ctx, len(gpuPods), func(ctx context.Context, j int) error {
		i := gpuPods[j]
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
			Name: claimName(sched, i), Namespace: b.ns, Labels: map[string]string{labelBench: b.runID, labelScheduler: sched},
		}}
		c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: draClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: b.workload[i].gpus,
		}}}
		if _, err := b.kube.ResourceV1().ResourceClaims(b.ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create claim %s: %w", c.Name, err)
		}
		return nil
	})
}

// deleteClaims removes sched's ResourceClaims once its pods are gone, so that the next
// scheduler starts from unallocated devices. A claim is gone only once the
// resourceclaim controller has seen its pods go and lifted its finalizer; the next round
// creates claims of the same names.
func (b *bench) deleteClaims(ctx context.Context, sched string) error {
	sel := metav1.ListOptions{LabelSelector: labelScheduler + "=" + sched}
	err := b.kube.ResourceV1().ResourceClaims(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s claims: %w", sched, err)
	}
	for {
		list, err := b.kube.ResourceV1().ResourceClaims(b.ns).List(ctx, sel)
		if err != nil {
			return fmt.Errorf("list %s claims: %w", sched, err)
		}
		if len(list.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d %s claims still there (first %s, finalizers %v): %w",
				len(list.Items), sched, list.Items[0].Name, list.Items[0].Finalizers, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// useClaim has the pod's container take its GPUs from its claim instead of sextant.io/gpu.
func useClaim(p *corev1.Pod, claim string) {
	c := &p.Spec.Containers[0]
	delete(c.Resources.Requests, resourceGPU)
	delete(c.Resources.Limits, resourceGPU)
	if len(c.Resources.Limits) == 0 {
		c.Resources.Limits = nil
	}
	c.Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}
}
