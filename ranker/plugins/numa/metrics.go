package numa

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"sextant.io/sextant/ranker/plugins/silence"
)

// Filter rejection reasons, the values of the reason label. Fixed strings keep the
// label's cardinality bounded.
const (
	reasonNoFit           = "insufficient_numa_capacity"
	reasonSingleNUMANode  = "single_numa_node"
	reasonNoTopology      = "no_topology"
	reasonMalformedPolicy = "malformed_policy"
	reasonNodeNotFound    = "node_not_found"
	reasonNoPinning       = "no_pinning"
	// A pod's DRA devices: spread over NUMA nodes, of no known NUMA node, or allocated
	// by DynamicResources elsewhere than predicted (Reserve).
	reasonDRASpread  = "dra_devices_spread"
	reasonDRAUnknown = "dra_device_numa_unknown"
	reasonDRAMoved   = "dra_allocation_moved"
)

// Registered with legacyregistry because that is the registry kube-scheduler serves on
// /metrics.
var (
	filterRejections = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "sextant_ranker_numa_filter_rejections_total",
		Help:           "Pods the NUMAAware plugin rejected, by reason (per node for Filter, per pod for PreFilter).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	reservations = metrics.NewGauge(&metrics.GaugeOpts{
		Name:           "sextant_ranker_numa_reservations",
		Help:           "Pods NUMAAware reserved NUMA capacity for whose numa.sextant.io/nodes annotation the ranker has not seen on the bound pod yet.",
		StabilityLevel: metrics.ALPHA,
	})
	// undecided counts what Filter's rejections cannot show: a pod without a
	// single-numa-node policy is still placed on a node whose agent does not pin or is
	// silent, with no NUMA decision, and so runs wherever the kubelet puts it.
	undecided = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "sextant_ranker_numa_undecided_placements_total",
		Help:           "Pods NUMAAware let onto a node without a NUMA decision because the node's agent would not carry one out, by reason (no_pinning, silent_agent).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(filterRejections, reservations, undecided)
		// Every reason at 0 from the start, so a rate over it is 0 rather than no data.
		for _, r := range []string{reasonNoFit, reasonSingleNUMANode, reasonNoTopology, reasonMalformedPolicy, reasonNodeNotFound, reasonNoPinning, silence.Reason, reasonDRASpread, reasonDRAUnknown, reasonDRAMoved} {
			filterRejections.WithLabelValues(r)
		}
		for _, r := range []string{reasonNoPinning, silence.Reason} {
			undecided.WithLabelValues(r)
		}
	})
}
