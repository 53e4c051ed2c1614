package bandwidth

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics go to the legacy registry, which kube-scheduler serves on /metrics next to
// its own. Labels are small fixed sets: node names would be unbounded at 5000 nodes.
const metricsSubsystem = "sextant_ranker_bandwidth"

// Filter rejection reasons, the values of the reason label.
const (
	reasonInvalidAnnotation = "invalid_annotation" // PreFilter: the pod's annotations are malformed
	reasonNoReport          = "no_report"          // the node has no NodeBandwidth
	reasonStaleReport       = "stale_report"       // it reached the ranker longer than staleAfter ago
	reasonPartialReport     = "partial_report"     // its window is shorter than minWindow, or it has no sampleTime
	reasonUnknownCapacity   = "unknown_capacity"   // a required direction has no remaining (capacity unknown)
	reasonNoNetwork         = "no_network"         // the node's report has no network the pod names
	reasonIngress           = "insufficient_ingress"
	reasonEgress            = "insufficient_egress"
	reasonOutsideWindow     = "outside_best_fit_window" // bestFitWindow strict: |available - expected| > expected - required
)

// Reservation release reasons, the values of the reason label.
const (
	releaseCovered    = "covered"    // a report taken long enough after the pod started running
	releaseUnreserved = "unreserved" // the scheduler gave up on the placement
	releasePodGone    = "pod_gone"   // the pod was deleted or finished
)

var (
	filterRejections = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "filter_rejections_total",
		Help:           "Nodes (or, for invalid_annotation, pods) BandwidthAware rejected, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})

	reservationsGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      metricsSubsystem,
		Name:           "reservations",
		Help:           "Pods currently holding a bandwidth reservation in the ledger.",
		StabilityLevel: metrics.ALPHA,
	})

	reservedBytes = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem:      metricsSubsystem,
		Name:           "reserved_bytes_per_second",
		Help:           "Bandwidth currently reserved in the ledger over all nodes, by direction, in bytes per second.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"direction"})

	reservationsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "reservations_total",
		Help:           "Bandwidth reservations made: source=scheduled by Reserve, source=observed for bound pods found in the cluster (leader change, other schedulers).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"source"})

	releasesTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "reservation_releases_total",
		Help:           "Bandwidth reservations released, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})

	registerOnce sync.Once
)

// registerMetrics registers the collectors once per process, however many profiles
// instantiate the plugin.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(filterRejections, reservationsGauge, reservedBytes, reservationsTotal, releasesTotal)
		// Every reason at 0 from the start, so a rate over it is 0 rather than no data.
		for _, r := range []string{reasonInvalidAnnotation, reasonNoReport, reasonStaleReport, reasonPartialReport,
			reasonUnknownCapacity, reasonNoNetwork, reasonIngress, reasonEgress, reasonOutsideWindow} {
			filterRejections.WithLabelValues(r)
		}
		for _, r := range []string{releaseCovered, releaseUnreserved, releasePodGone} {
			releasesTotal.WithLabelValues(r)
		}
		for _, s := range []string{"scheduled", "observed"} {
			reservationsTotal.WithLabelValues(s)
		}
		for _, d := range []string{"ingress", "egress"} {
			reservedBytes.WithLabelValues(d)
		}
	})
}
