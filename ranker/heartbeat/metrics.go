package heartbeat

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// rejectedTotal counts object versions, not events: a relist of the same bad object
// does not count again. The labels are small fixed sets (kinds and the Reason
// constants); the node is in the log line, not a label.
var rejectedTotal = metrics.NewCounterVec(&metrics.CounterOpts{
	Subsystem:      "sextant_ranker_heartbeat",
	Name:           "rejected_total",
	Help:           "Heartbeat object versions the ranker could not use, by kind and reason; their nodes count as having no report of that kind.",
	StabilityLevel: metrics.ALPHA,
}, []string{"kind", "reason"})

var registerOnce sync.Once

// registerMetrics registers the collector with the legacy registry, which
// kube-scheduler serves on /metrics, once per process.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(rejectedTotal)
	})
}
