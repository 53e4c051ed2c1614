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
	devices       *prometheus.GaugeVec
}

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
	}
	if reg != nil {
		reg.MustRegister(m.registrations, m.preferred, m.allocations, m.refused, m.devices)
	}
	return m
}
