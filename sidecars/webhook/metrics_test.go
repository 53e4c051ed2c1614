package webhook

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestHandlerMetrics: a patched pod, a rejected annotation and an unreadable request
// each show in their series.
func TestHandlerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := &Handler{Mutator: cfg, Metrics: NewMetrics(reg)}
	review(t, h, PathMutate, admissionv1.Create, jobPod(corev1.RestartPolicyNever, sidecar("proxy", "sleep", "3600")), nil)
	bad := jobPod(corev1.RestartPolicyNever)
	bad.Annotations["bandwidth.sextant.io/ingress-required"] = "lots"
	review(t, h, PathValidate, admissionv1.Create, bad, nil)
	rec := httptest.NewRecorder()
	h.ServeMux().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, PathValidate, bytes.NewReader([]byte("{"))))
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("unreadable review: HTTP %d, want 400", rec.Code)
	}
	m := h.Metrics
	for name, c := range map[string]struct {
		got  float64
		want float64
	}{
		"patches":                  {testutil.ToFloat64(m.patches), 1},
		"mutate rejections":        {testutil.ToFloat64(m.rejections.WithLabelValues(webhookMutate)), 0},
		"validate rejections":      {testutil.ToFloat64(m.rejections.WithLabelValues(webhookValidate)), 1},
		"mutate requests 200":      {testutil.ToFloat64(m.requests.WithLabelValues(webhookMutate, "200")), 1},
		"validate requests 200":    {testutil.ToFloat64(m.requests.WithLabelValues(webhookValidate, "200")), 1},
		"validate requests 400":    {testutil.ToFloat64(m.requests.WithLabelValues(webhookValidate, "400")), 1},
		"duration series (labels)": {float64(testutil.CollectAndCount(m.duration)), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
}

// TestHandlerRefusesLongReviews: a review over MaxBodyBytes is refused with 413, even
// of undeclared length, and counted with its code.
func TestHandlerRefusesLongReviews(t *testing.T) {
	h := &Handler{Mutator: cfg, Metrics: NewMetrics(prometheus.NewRegistry()), MaxBodyBytes: 1 << 10}
	r := httptest.NewRequest(http.MethodPost, PathValidate, io.MultiReader(bytes.NewReader(make([]byte, 4<<10))))
	r.ContentLength = -1
	rec := httptest.NewRecorder()
	h.ServeMux().ServeHTTP(rec, r)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a review of 4 KiB with a limit of 1 KiB: HTTP %d, want 413", rec.Code)
	}
	if got := testutil.ToFloat64(h.Metrics.requests.WithLabelValues(webhookValidate, "413")); got != 1 {
		t.Errorf("validate requests 413 = %v, want 1", got)
	}
}
