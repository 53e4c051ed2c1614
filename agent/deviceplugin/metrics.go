package deviceplugin

import (
	"github.com/prometheus/client_golang/prometheus"

	"sextant.io/sextant/api/v1alpha1"
)

// Metrics are the device plugin's Prometheus metrics.
type Metrics struct {
	registrations *prometheus.CounterVec
	preferred     *prometheus.CounterVec
	allocations   *prometheus.CounterVec
	refused       *prometheus.CounterVec
	unchecked     *prometheus.CounterVec
	devices       *prometheus.GaugeVec
}

// Why an allocation was handed out without being held to the ranker's choice: the
// reason label of sextant_device_allocations_unchecked_total.
const (
	// UncheckedFreshListFailed: the API server's list of the node's pods was needed (no
	// known pod could be the one, or to confirm a refusal the kubelet had not) and failed.
	UncheckedFreshListFailed = "fresh_list_failed"
	// UncheckedPodResourcesFailed: the kubelet's PodResources did not answer, so the
	// devices were judged against every pod they may be for, not the one being admitted.
	UncheckedPodResourcesFailed = "podresources_failed"
	// UncheckedNoCandidate: no pod the agent or the API server knows can be the one.
	UncheckedNoCandidate = "no_candidate"
)

// NewMetrics registers the device plugin's metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_device_plugin_registrations_total",
			Help: "Registrations of a device resource with the kubelet (at start, and again after the kubelet or the plugin's socket restarted), by resource and result (ok, failed).",
		}, []string{"resource", "result"}),
		preferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_device_preferred_allocations_total",
			Help: "Containers the kubelet asked the device plugin which devices to give, by resource and how the answer was found: annotation (one pending pod's devices.sextant.io/allocated fits), kubelet (several fit; PodResources named the one being admitted), tie (several fit; the oldest pod's), fallback (none fits; the kubelet's kind of choice).",
		}, []string{"resource", "outcome"}),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_device_allocations_total",
			Help: "Containers the device plugin handed devices to (Allocate), by resource.",
		}, []string{"resource"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_device_allocations_refused_total",
			Help: "Containers the device plugin refused devices to (Allocate), by resource: the kubelet allocated devices the ranker did not choose for the pod, and fails its admission.",
		}, []string{"resource"}),
		unchecked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_device_allocations_unchecked_total",
			Help: "Containers the device plugin handed devices to (Allocate) without holding them to the ranker's choice for the pod being admitted, by resource and reason: fresh_list_failed (the API server's list of the node's pods was needed and failed), podresources_failed (the kubelet's PodResources did not answer which pod it admits), no_candidate (no known pod can be the one).",
		}, []string{"resource", "reason"}),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sextant_device_plugin_devices",
			Help: "Devices the device plugin lists to the kubelet, by resource and health.",
		}, []string{"resource", "health"}),
	}
	for _, k := range v1alpha1.RequestableDeviceKinds {
		r := string(k.ResourceName())
		for _, res := range []string{"ok", "failed"} {
			m.registrations.WithLabelValues(r, res)
		}
		for _, o := range []string{OutcomeAnnotation, OutcomeKubelet, OutcomeTie, OutcomeFallback} {
			m.preferred.WithLabelValues(r, o)
		}
		m.allocations.WithLabelValues(r)
		m.refused.WithLabelValues(r)
		for _, why := range []string{UncheckedFreshListFailed, UncheckedPodResourcesFailed, UncheckedNoCandidate} {
			m.unchecked.WithLabelValues(r, why)
		}
	}
	if reg != nil {
		reg.MustRegister(m.registrations, m.preferred, m.allocations, m.refused, m.unchecked, m.devices)
	}
	return m
}
