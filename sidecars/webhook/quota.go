package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"sextant.io/sextant/api/bandwidthquota"
	"sextant.io/sextant/api/v1alpha1"
)

// Quotas reads what the quota check needs of a namespace.
type Quotas interface {
	// Of returns the namespace's BandwidthQuotas.
	Of(ctx context.Context, namespace string) ([]*v1alpha1.BandwidthQuota, error)
	// Usage returns what the namespace's pods that have not finished require, but for
	// the pod except.
	Usage(ctx context.Context, namespace string, except types.UID) (bandwidthquota.Usage, error)
}

// quotaTimeout bounds the two reads of a quota check, well inside the webhook's own
// timeout: a pod the check could not finish is let through (see checkQuota).
const quotaTimeout = 4 * time.Second

// checkQuota refuses a pod whose required rates would take its namespace past one of
// its BandwidthQuotas, as the quota admission plugin refuses a pod past a
// ResourceQuota: on CREATE, and on an UPDATE of a pod not bound yet that raises them
// (a bound pod's cannot change: the chart's policy). Two pods admitted at the same
// moment may both pass; the ranker, counting the pods it places, places no pod past
// the quota, so the namespace cannot hold more than its quota in any case. A pod whose
// check could not be done is let through with a warning, for the same reason.
func (h *Handler) checkQuota(req *admissionv1.AdmissionRequest, pod, old *corev1.Pod) *admissionv1.AdmissionResponse {
	if h.Quotas == nil {
		return nil
	}
	network, claim, ok := bandwidthquota.Claim(pod.Annotations)
	if !ok {
		return nil
	}
	if old != nil {
		oldNetwork, oldClaim, oldOK := bandwidthquota.Claim(old.Annotations)
		if oldOK && oldNetwork == network && oldClaim.Ingress >= claim.Ingress && oldClaim.Egress >= claim.Egress {
			return nil // asks no more than it was admitted with
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), quotaTimeout)
	defer cancel()
	quotas, err := h.Quotas.Of(ctx, req.Namespace)
	if err == nil && len(quotas) == 0 {
		return nil
	}
	var usage bandwidthquota.Usage
	if err == nil {
		usage, err = h.Quotas.Usage(ctx, req.Namespace, pod.UID)
	}
	if err != nil {
		h.Metrics.quotaUnchecked()
		resp := allowed()
		resp.Warnings = []string{fmt.Sprintf("sextant: the namespace's BandwidthQuota was not checked (%v); the ranker still places no pod past it", err)}
		return resp
	}
	err = bandwidthquota.Check(quotas, usage, network, claim)
	var exceeded *bandwidthquota.ExceededError
	if !errors.As(err, &exceeded) {
		return nil
	}
	h.Metrics.quotaRefused()
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden,
		Message: "sextant: " + err.Error(),
	}}
}

// APIQuotas reads quotas and pods from the API server at each check: the check is
// rare (pods that require bandwidth, in namespaces with a quota), and reading afresh
// sees the pods admitted a moment before, which an informer may not hold yet.
type APIQuotas struct {
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
}

var (
	quotaResource = v1alpha1.GroupVersion.WithResource("bandwidthquotas")
	podResource   = corev1.SchemeGroupVersion.WithResource("pods")
)

// Of implements Quotas.
func (a APIQuotas) Of(ctx context.Context, namespace string) ([]*v1alpha1.BandwidthQuota, error) {
	list, err := a.Dynamic.Resource(quotaResource).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list BandwidthQuotas: %w", err)
	}
	var out []*v1alpha1.BandwidthQuota
	for i := range list.Items {
		var q v1alpha1.BandwidthQuota
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &q); err != nil {
			return nil, fmt.Errorf("decode BandwidthQuota %s: %w", list.Items[i].GetName(), err)
		}
		out = append(out, &q)
	}
	return out, nil
}

// Usage implements Quotas, from the metadata of the namespace's pods that have not
// finished, a page at a time.
func (a APIQuotas) Usage(ctx context.Context, namespace string, except types.UID) (bandwidthquota.Usage, error) {
	usage := bandwidthquota.Usage{}
	opts := metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed", Limit: 500}
	for {
		list, err := a.Metadata.Resource(podResource).Namespace(namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list pods: %w", err)
		}
		for _, p := range list.Items {
			if p.UID == except {
				continue
			}
			if network, r, ok := bandwidthquota.Claim(p.Annotations); ok {
				usage.Add(network, r)
			}
		}
		if list.Continue == "" {
			return usage, nil
		}
		opts.Continue = list.Continue
	}
}
