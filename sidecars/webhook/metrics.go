package webhook

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the webhook's Prometheus metrics. Labels are fixed sets: the webhook
// (mutate, validate) and the HTTP status code it answered with.
type Metrics struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	patches    prometheus.Counter
	rejections *prometheus.CounterVec
	// quota counts quota checks by result: refused, or unchecked (let through).
	quota *prometheus.CounterVec
}

// Values of the webhook label.
const (
	webhookMutate   = "mutate"
	webhookValidate = "validate"
)

// NewMetrics registers the webhook's metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_webhook_requests_total",
			Help: "Admission requests the webhook answered, by webhook (mutate, validate) and HTTP status code; a code other than 200 is a request the webhook could not review.",
		}, []string{"webhook", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sextant_webhook_request_duration_seconds",
			Help: "Time from a request's arrival to the webhook's answer, by webhook.",
			// The API server waits up to the configuration's timeoutSeconds (10 s).
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10},
		}, []string{"webhook"}),
		patches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sextant_webhook_patches_total",
			Help: "Pods the mutating webhook patched (sidecars prepared).",
		}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_webhook_rejections_total",
			Help: "Admission requests the webhook denied, by webhook: validate for malformed sextant annotations, mutate for pods it could not prepare.",
		}, []string{"webhook"}),
		quota: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_webhook_bandwidth_quota_checks_total",
			Help: "Pods the validating webhook checked against a namespace's BandwidthQuotas and refused (result=refused), or let through because the check failed (result=unchecked; the ranker still places no pod past the quota).",
		}, []string{"result"}),
	}
	for _, r := range []string{"refused", "unchecked"} {
		m.quota.WithLabelValues(r)
	}
	for _, w := range []string{webhookMutate, webhookValidate} {
		m.requests.WithLabelValues(w, "200")
		m.duration.WithLabelValues(w)
		m.rejections.WithLabelValues(w)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.patches, m.rejections, m.quota)
	}
	return m
}

// observe counts one answered request; nil Metrics count nothing.
func (m *Metrics) observe(webhook string, code int, start time.Time, resp reviewOutcome) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(webhook, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(webhook).Observe(time.Since(start).Seconds())
	if resp.denied {
		m.rejections.WithLabelValues(webhook).Inc()
	}
	if resp.patched {
		m.patches.Inc()
	}
}

func (m *Metrics) quotaRefused() {
	if m != nil {
		m.quota.WithLabelValues("refused").Inc()
	}
}

func (m *Metrics) quotaUnchecked() {
	if m != nil {
		m.quota.WithLabelValues("unchecked").Inc()
	}
}

// reviewOutcome is what the metrics need of an answer.
type reviewOutcome struct{ denied, patched bool }

// statusRecorder remembers the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

// Unwrap lets http.ResponseController and http.MaxBytesReader reach the connection.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}
