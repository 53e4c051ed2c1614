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

// legacyReports warns of agents older than networks: their nodes' pods are placed on
// status.total as the pod network, which on a node with several NICs is a sum no path
// has. Upgrading those agents brings it to 0.
var legacyReports = metrics.NewGauge(&metrics.GaugeOpts{
	Subsystem:      "sextant_ranker_heartbeat",
	Name:           "legacy_bandwidth_reports",
	Help:           "Nodes whose NodeBandwidth has no networks (an agent older than networks): the ranker reads its total as the pod network.",
	StabilityLevel: metrics.ALPHA,
})

var registerOnce sync.Once

// registerMetrics registers the collector with the legacy registry, which
// kube-scheduler serves on /metrics, once per process.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(rejectedTotal, legacyReports)
		// Every kind and reason at 0 from the start, so an increase over it is 0 rather
		// than no data.
		for _, kind := range []string{kindBandwidth, kindTopology} {
			for _, r := range []string{ReasonUndecodable, ReasonOutOfRange, ReasonInconsistent} {
				rejectedTotal.WithLabelValues(kind, r)
			}
		}
	})
}
