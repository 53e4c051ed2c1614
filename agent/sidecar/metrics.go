package sidecar

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the terminator's Prometheus metrics.
type Metrics struct {
	stopSeconds    prometheus.Histogram
	processSeconds prometheus.Histogram
	phaseSeconds   *prometheus.HistogramVec
	stops          *prometheus.CounterVec
	restarts       prometheus.Counter
}

// Results of a stop, the label of sextant_sidecar_stops_total.
const (
	resultStopped = "stopped"
	resultFailed  = "failed"
	// resultSkipped is a sidecar the rules say to stop and the agent leaves running,
	// counted once per pod and container (see leftRunning).
	resultSkipped = "skipped"
)

// NewMetrics registers the terminator's metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		stopSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sextant_sidecar_stop_seconds",
			Help: "Time from the last main container of a pod finishing to a sidecar the agent stopped having exited, from the runtime's own timestamps.",
			// The goals are tens of milliseconds (docs/performance.md); a sidecar that
			// ignores SIGTERM takes its pod's grace period (30 s by default).
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30, 60, 120},
		}),
		processSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sextant_sidecar_stop_process_seconds",
			Help:    "Time from the agent hearing that the last main container of a pod finished to the process of the sidecar it signalled having ended, both as the agent saw them (pidfds, --sidecar-signal=process). Unlike sextant_sidecar_stop_seconds it leaves out the runtime's recording of the exits.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30, 60, 120},
		}),
		phaseSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sextant_sidecar_stop_phase_seconds",
			Help:    "Time each phase of a sidecar stop took, by phase, in order: heard (last main container finished to the agent hearing of it), queued (to a worker taking up the pod), decided (to the decision to stop), confirmed (to the runtime recording the main containers' exits, native sidecars only), marked (to the stop mark written in the agent's state directory), stopped (to the sidecar's exit event from the runtime), recorded (to its Event written).",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"phase"}),
		stops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_sidecar_stops_total",
			Help: "Sidecar containers the agent stopped, by result (stopped, failed: the runtime refused or the container kept running; skipped: left running, a regular container without the wrapper in an OnFailure pod).",
		}, []string{"result"}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sextant_sidecar_event_stream_restarts_total",
			Help: "Times the subscription to containerd's exit events broke and was made again.",
		}),
	}
	m.stops.WithLabelValues(resultStopped)
	m.stops.WithLabelValues(resultFailed)
	m.stops.WithLabelValues(resultSkipped)
	if reg != nil {
		reg.MustRegister(m.stopSeconds, m.processSeconds, m.phaseSeconds, m.stops, m.restarts)
	}
	return m
}
