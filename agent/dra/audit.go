package dra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"sextant.io/sextant/agent/nodepods"
)

// ReasonMismatch is the Event reason on a pod whose container the kubelet gave other
// devices of this driver than the claim's allocation, or without the CDI devices the
// driver prepared for them.
const ReasonMismatch = "DRAAllocationMismatch"

// Mismatch is one container's claim whose devices of this driver, as the kubelet's
// PodResources reports them, differ from the claim's allocation, or reach the
// container without the driver's CDI device for them.
type Mismatch struct {
	Namespace, Pod, Container, Claim string
	// Allocated and Assigned are DRA device names, sorted.
	Allocated, Assigned []string
	// MissingCDI are the driver's CDI devices the kubelet did not pass for the claim.
	MissingCDI []string
}

func (m Mismatch) String() string {
	s := fmt.Sprintf("container %s, claim %s: allocated [%s], the kubelet assigned [%s]", m.Container, m.Claim,
		strings.Join(m.Allocated, ","), strings.Join(m.Assigned, ","))
	if len(m.MissingCDI) > 0 {
		s += fmt.Sprintf(", without the CDI devices [%s]", strings.Join(m.MissingCDI, ","))
	}
	return s
}

// Compare checks every container's claims in list (the kubelet's PodResources) for
// this driver's devices against the claims' allocations (claim, from the API): the same
// devices, each with the CDI device Prepare made for it. A claim that cannot be read
// (deleted meanwhile) is skipped.
func Compare(list []*podresourcesapi.PodResources, claim func(namespace, name string) (*resourceapi.ResourceClaim, error)) []Mismatch {
	var out []Mismatch
	for _, p := range list {
		for _, c := range p.GetContainers() {
			for _, dr := range c.GetDynamicResources() {
				var assigned, cdi []string
				for _, r := range dr.GetClaimResources() {
					if r.GetDriverName() != DriverName {
						continue
					}
					assigned = append(assigned, r.GetDeviceName())
					for _, d := range r.GetCdiDevices() {
						cdi = append(cdi, d.GetName())
					}
				}
				cl, err := claim(dr.GetClaimNamespace(), dr.GetClaimName())
				if err != nil || cl.Status.Allocation == nil {
					continue
				}
				var allocated, missing []string
				for _, r := range cl.Status.Allocation.Devices.Results {
					if r.Driver == DriverName {
						allocated = append(allocated, r.Device)
					}
				}
				for _, a := range assigned {
					if want := qualified(cdiName(cl.UID, a)); !slices.Contains(cdi, want) {
						missing = append(missing, want)
					}
				}
				if len(allocated) == 0 && len(assigned) == 0 {
					continue
				}
				slices.Sort(allocated)
				slices.Sort(assigned)
				// A container may use some of a claim's requests only: each device it was
				// given must be the claim's, and carry its CDI device.
				foreign := slices.ContainsFunc(assigned, func(a string) bool { return !slices.Contains(allocated, a) })
				if foreign || len(missing) > 0 {
					out = append(out, Mismatch{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: c.GetName(), Claim: dr.GetClaimName(),
						Allocated: allocated, Assigned: assigned, MissingCDI: missing})
				}
			}
		}
	}
	return out
}

// AuditConfig is what Audit needs beside the driver.
type AuditConfig struct {
	Every time.Duration
	// List is the kubelet's PodResources List.
	List func(context.Context) ([]*podresourcesapi.PodResources, error)
	// Pod finds a pod of the node by namespace and name (the agent's pod cache).
	Pod func(namespace, name string) (*corev1.Pod, bool)
	// Trigger, if set, asks for a pass now (a container started).
	Trigger <-chan struct{}
}

// Audit compares the kubelet's PodResources with the claims' allocations at every
// interval and on trigger, until ctx ends; each mismatch is counted and recorded as a
// Warning Event on its pod once.
func (d *Driver) Audit(ctx context.Context, cfg AuditConfig) {
	reported := map[string]bool{}
	t := time.NewTicker(cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-cfg.Trigger:
		}
		list, err := cfg.List(ctx)
		if err != nil {
			d.log.Error(err, "listing the kubelet's PodResources for the DRA audit")
			continue
		}
		get := func(ns, name string) (*resourceapi.ResourceClaim, error) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return d.cfg.Kube.ResourceV1().ResourceClaims(ns).Get(cctx, name, metav1.GetOptions{})
		}
		for _, m := range Compare(list, get) {
			pod, ok := cfg.Pod(m.Namespace, m.Pod)
			if !ok {
				continue
			}
			key := string(pod.UID) + "/" + m.Container + "/" + m.Claim
			if reported[key] {
				continue
			}
			reported[key] = true
			d.metrics.mismatches.Inc()
			d.log.Info("DRA devices differ from the claim's allocation", "pod", m.Namespace+"/"+m.Pod, "mismatch", m.String())
			d.event(ctx, pod, m)
		}
	}
}

// event records the mismatch on the pod, named after the pod and claim so that an agent
// that restarts and finds the same again creates nothing new.
func (d *Driver) event(ctx context.Context, pod *corev1.Pod, m Mismatch) {
	src := nodepods.Source{Node: d.cfg.NodeName, Component: "sextant-agent", Controller: "sextant.io/dra-audit"}
	ev := nodepods.NewPodEvent(src, pod, nodepods.PodEvent{Type: corev1.EventTypeWarning, Reason: ReasonMismatch,
		Suffix: "dra-mismatch-" + m.Container, Container: m.Container, Message: m.String()}, time.Now())
	if err := nodepods.CreateEvent(ctx, d.cfg.Kube, d.cfg.NodeName, ev, d.log); err != nil {
		d.log.Error(err, "could not record an event", "pod", pod.Namespace+"/"+pod.Name, "reason", ReasonMismatch)
	}
}
