package virtualnode

import "github.com/prometheus/client_golang/prometheus"

// Results of a swap, the values of the result label.
const (
	resultSwapped = "swapped"
	resultFailed  = "failed"
)

// Metrics are the controller's Prometheus metrics.
type Metrics struct {
	swaps *prometheus.CounterVec
}

// NewMetrics registers the controller's metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{swaps: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sextant_virtual_node_swaps_total",
		Help: "Sidecar containers on virtual nodes the controller swapped to the exit image, by result (swapped; failed: the pod update was refused and is retried).",
	}, []string{"result"})}
	m.swaps.WithLabelValues(resultSwapped)
	m.swaps.WithLabelValues(resultFailed)
	if reg != nil {
		reg.MustRegister(m.swaps)
	}
	return m
}

func (m *Metrics) count(result string, containers int) {
	if m != nil {
		m.swaps.WithLabelValues(result).Add(float64(containers))
	}
}
