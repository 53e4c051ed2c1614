package report

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts heartbeat writes by kind (NodeBandwidth, NodeTopology).
type Metrics struct {
	writes   *prometheus.CounterVec
	failures *prometheus.CounterVec
}

// NewMetrics registers the report metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_report_writes_total",
			Help: "Heartbeat objects written to the API server, by kind.",
		}, []string{"kind"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_report_write_failures_total",
			Help: "Heartbeat writes that failed after their retries, by kind.",
		}, []string{"kind"}),
	}
	for _, kind := range []string{kindBandwidth, kindTopology} {
		m.writes.WithLabelValues(kind)
		m.failures.WithLabelValues(kind)
	}
	if reg != nil {
		reg.MustRegister(m.writes, m.failures)
	}
	return m
}
