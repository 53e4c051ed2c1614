package devices

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/silence"
)

// Filter rejection reasons, the values of the reason label; fixed strings keep its
// cardinality bounded (insufficient_<kind> for the four kinds).
const (
	reasonNoTopology   = "no_topology"
	reasonNodeNotFound = "node_not_found"
)

func reasonInsufficient(kind v1alpha1.DeviceKind) string { return "insufficient_" + string(kind) }

// Registered with legacyregistry because that is the registry kube-scheduler serves on
// /metrics.
var (
	filterRejections = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "sextant_ranker_device_filter_rejections_total",
		Help:           "Nodes the DeviceAware plugin rejected for a pod, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	reservations = metrics.NewGauge(&metrics.GaugeOpts{
		Name:           "sextant_ranker_device_reservations",
		Help:           "Pods DeviceAware reserved devices for whose devices.sextant.io/allocated annotation the ranker has not seen on the bound pod yet.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(filterRejections, reservations)
		// Every reason at 0 from the start, so a rate over it is 0 rather than no data.
		for _, r := range []string{reasonNoTopology, silence.Reason, reasonNodeNotFound} {
			filterRejections.WithLabelValues(r)
		}
		for _, k := range v1alpha1.RequestableDeviceKinds {
			filterRejections.WithLabelValues(reasonInsufficient(k))
		}
	})
}
