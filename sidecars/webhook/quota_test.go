package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/bandwidthquota"
	"sextant.io/sextant/api/v1alpha1"
)

// fakeQuotas is a namespace's quotas and its other pods' claims.
type fakeQuotas struct {
	quotas []*v1alpha1.BandwidthQuota
	pods   map[types.UID]map[string]string
	err    error
}

func (f fakeQuotas) Of(context.Context, string) ([]*v1alpha1.BandwidthQuota, error) {
	return f.quotas, f.err
}

func (f fakeQuotas) Usage(_ context.Context, _ string, except types.UID) (bandwidthquota.Usage, error) {
	u := bandwidthquota.Usage{}
	for uid, ann := range f.pods {
		if uid == except {
			continue
		}
		if n, r, ok := bandwidthquota.Claim(ann); ok {
			u.Add(n, r)
		}
	}
	return u, f.err
}

func quota(name string, hard ...v1alpha1.NetworkQuota) *v1alpha1.BandwidthQuota {
	return &v1alpha1.BandwidthQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"}, Spec: v1alpha1.BandwidthQuotaSpec{Hard: hard}}
}

func bandwidthPod(uid string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "team-a", UID: types.UID(uid), Annotations: ann},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
}

func TestValidateRefusesPodsPastTheQuota(t *testing.T) {
	quotas := fakeQuotas{
		quotas: []*v1alpha1.BandwidthQuota{
			quota("pod-network", v1alpha1.NetworkQuota{Network: "pod", Ingress: "500M"}),
			quota("storage", v1alpha1.NetworkQuota{Network: "storage", Egress: "1G"}),
		},
		pods: map[types.UID]map[string]string{
			"running": {annotations.IngressRequired: "400M", annotations.EgressRequired: "5G"},
			"stored":  {annotations.EgressRequired: "800M", annotations.BandwidthNetwork: "storage"},
		},
	}
	for _, c := range []struct {
		name    string
		op      admissionv1.Operation
		pod     map[string]string
		old     map[string]string
		wantErr string
	}{
		{name: "fits", op: admissionv1.Create, pod: map[string]string{annotations.IngressRequired: "100M"}},
		{name: "past the pod network's ingress", op: admissionv1.Create, pod: map[string]string{annotations.IngressRequired: "101M"},
			wantErr: `exceeded BandwidthQuota "pod-network" in namespace "team-a": network "pod" ingress-required would total 501M (400M used + 101M this pod), over its hard cap of 500M`},
		{name: "an uncapped direction", op: admissionv1.Create, pod: map[string]string{annotations.EgressRequired: "10G"}},
		{name: "past another network's quota", op: admissionv1.Create, pod: map[string]string{annotations.EgressRequired: "300M", annotations.BandwidthNetwork: "storage"},
			wantErr: `BandwidthQuota "storage"`},
		{name: "expected only claims nothing", op: admissionv1.Create, pod: map[string]string{annotations.IngressExpected: "10G"}},
		{name: "an update raising it past", op: admissionv1.Update, pod: map[string]string{annotations.IngressRequired: "200M"},
			old: map[string]string{annotations.IngressRequired: "50M"}, wantErr: "BandwidthQuota \"pod-network\""},
		{name: "an update lowering it", op: admissionv1.Update, pod: map[string]string{annotations.IngressRequired: "150M"},
			old: map[string]string{annotations.IngressRequired: "200M"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &Handler{Quotas: quotas}
			pod := bandwidthPod("new", c.pod)
			var old *corev1.Pod
			if c.old != nil {
				old = bandwidthPod("new", c.old)
			}
			resp := review(t, h, PathValidate, c.op, pod, old)
			if c.wantErr == "" {
				if !resp.Allowed {
					t.Fatalf("refused: %s", resp.Result.Message)
				}
				return
			}
			if resp.Allowed {
				t.Fatalf("admitted, want refused with %q", c.wantErr)
			}
			if !strings.Contains(resp.Result.Message, c.wantErr) || resp.Result.Code != 403 || resp.Result.Reason != metav1.StatusReasonForbidden {
				t.Errorf("refused with %d %s %q, want 403 Forbidden containing %q", resp.Result.Code, resp.Result.Reason, resp.Result.Message, c.wantErr)
			}
		})
	}

	t.Run("a pod updated is not counted twice", func(t *testing.T) {
		q := quotas
		q.pods = map[types.UID]map[string]string{"new": {annotations.IngressRequired: "450M"}}
		resp := review(t, &Handler{Quotas: q}, PathValidate, admissionv1.Update, bandwidthPod("new", map[string]string{annotations.IngressRequired: "500M"}),
			bandwidthPod("new", map[string]string{annotations.IngressRequired: "450M"}))
		if !resp.Allowed {
			t.Errorf("raising 450M to 500M under a 500M quota: %s", resp.Result.Message)
		}
	})
	t.Run("a failed check lets the pod through with a warning", func(t *testing.T) {
		q := quotas
		q.err = errors.New("connection refused")
		resp := review(t, &Handler{Quotas: q}, PathValidate, admissionv1.Create, bandwidthPod("new", map[string]string{annotations.IngressRequired: "1G"}), nil)
		if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "connection refused") {
			t.Errorf("allowed %v, warnings %q; want allowed with a warning naming the error", resp.Allowed, resp.Warnings)
		}
	})
	t.Run("a namespace without quotas", func(t *testing.T) {
		resp := review(t, &Handler{Quotas: fakeQuotas{}}, PathValidate, admissionv1.Create, bandwidthPod("new", map[string]string{annotations.IngressRequired: "1P"}), nil)
		if !resp.Allowed || len(resp.Warnings) != 0 {
			t.Errorf("allowed %v, warnings %q; want allowed", resp.Allowed, resp.Warnings)
		}
	})
}
