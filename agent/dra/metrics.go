package dra

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the driver's Prometheus metrics.
type Metrics struct {
	published     prometheus.Gauge
	prepared      prometheus.Gauge
	prepares      *prometheus.CounterVec
	publishErrors prometheus.Counter
	mismatches    prometheus.Counter
}

// NewMetrics registers the driver's metrics with reg (none if reg is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		published: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sextant_dra_published_devices", Help: "Devices the node's DRA driver publishes in its ResourceSlices.",
		}),
		prepared: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sextant_dra_prepared_claims", Help: "ResourceClaims the node's DRA driver has prepared and not unprepared.",
		}),
		prepares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_dra_prepares_total", Help: "ResourceClaim preparations by outcome (ok, error).",
		}, []string{"outcome"}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sextant_dra_publish_errors_total", Help: "Errors publishing the node's ResourceSlices.",
		}),
		mismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sextant_dra_allocation_mismatches_total", Help: "Containers whose devices of the node's DRA driver, as the kubelet's PodResources reports them, differ from their claim's allocation or lack the driver's CDI device; once per pod, container and claim.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.prepared, m.prepares, m.publishErrors, m.mismatches)
	}
	return m
}
