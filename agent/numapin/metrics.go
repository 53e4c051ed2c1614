package numapin

import "github.com/prometheus/client_golang/prometheus"

// How a pod came to be pinned, the label of sextant_numa_pins_total.
const (
	// pathPodCgroup: the pod's cgroup was narrowed before it had any child cgroup, so
	// every container of the pod inherits the set from its first instruction.
	pathPodCgroup = "pod-cgroup"
	// pathCatchUp: containers existed already; they were narrowed where they run.
	pathCatchUp = "catch-up"
	// pathRepair: a pod pinned before was found widened, or narrowed by someone else to
	// another set, and narrowed to its own again.
	pathRepair = "repair"
)

// Metrics are the pinner's Prometheus metrics.
type Metrics struct {
	pins       *prometheus.CounterVec
	pinSeconds *prometheus.HistogramVec
	failures   *prometheus.CounterVec
	pinned     prometheus.Gauge
	runtime    *prometheus.CounterVec
}

// NewMetrics registers the pinner's metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		pins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_numa_pins_total",
			Help: "Pods the agent confined to the NUMA nodes in numa.sextant.io/nodes, by path: pod-cgroup (before any container existed: pinned from the first instruction), catch-up (containers ran first), repair (a pinned pod found widened, or narrowed by someone else to another set).",
		}, []string{"path"}),
		pinSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sextant_numa_pin_seconds",
			Help: "Time from the agent seeing a pod bound to its node to every container of the pod being confined to its NUMA nodes, by path.",
			// From a catch-up pin, which only writes files, to a pod-cgroup pin, which
			// waits for the kubelet to create the cgroup.
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"path"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_numa_pin_failures_total",
			Help: "Pods not pinned as numa.sextant.io/nodes says, and failed pinning attempts, by reason.",
		}, []string{"reason"}),
		pinned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sextant_numa_pinned_pods",
			Help: "Pods on this node confined to their NUMA nodes now.",
		}),
		runtime: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_numa_runtime_updates_total",
			Help: "CRI UpdateContainerResources calls that recorded a pod's NUMA cpuset in the runtime, by result.",
		}, []string{"result"}),
	}
	for _, p := range []string{pathPodCgroup, pathCatchUp, pathRepair} {
		m.pins.WithLabelValues(p)
	}
	for _, r := range failureReasons {
		m.failures.WithLabelValues(r)
	}
	m.runtime.WithLabelValues("updated")
	m.runtime.WithLabelValues("failed")
	if reg != nil {
		reg.MustRegister(m.pins, m.pinSeconds, m.failures, m.pinned, m.runtime)
	}
	return m
}
