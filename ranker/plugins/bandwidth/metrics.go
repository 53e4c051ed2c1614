package bandwidth

import (
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"sextant.io/sextant/ranker/heartbeat"
)

// Metrics go to the legacy registry, which kube-scheduler serves on /metrics next to
// its own. Labels are small fixed sets: node names would be unbounded at 5000 nodes.
const metricsSubsystem = "sextant_ranker_bandwidth"

// Filter rejection reasons, the values of the reason label.
const (
	reasonInvalidAnnotation = "invalid_annotation" // PreFilter: the pod's annotations are malformed
	reasonLedgerNotSynced   = "ledger_not_synced"  // PreFilter: the ledger has not yet seen every bound pod
	reasonNoReport          = "no_report"          // the node has no NodeBandwidth
	reasonStaleReport       = "stale_report"       // it reached the ranker longer than staleAfter ago
	reasonPartialReport     = "partial_report"     // its window is shorter than minWindow, or it has no sampleTime
	reasonUnknownCapacity   = "unknown_capacity"   // a required direction has no remaining (capacity unknown)
	reasonNoNetwork         = "no_network"         // the node's report has no network the pod names
	reasonIngress           = "insufficient_ingress"
	reasonEgress            = "insufficient_egress"
	reasonOutsideWindow     = "outside_best_fit_window" // bestFitWindow strict: |available - expected| > expected - required
	reasonGuaranteeIngress  = "guarantees_full_ingress" // the node enforces: the guarantees there leave less than the pod requires
	reasonGuaranteeEgress   = "guarantees_full_egress"
	reasonQuota             = "quota_exceeded" // per pod: its namespace's BandwidthQuota
)

// Reservation release reasons, the values of the reason label.
const (
	releaseCovered    = "covered"     // a report taken long enough after the pod started running
	releaseUnreserved = "unreserved"  // the scheduler gave up on the placement
	releasePodGone    = "pod_gone"    // the pod was deleted or finished
	releaseNotStarted = "not_started" // bound and not started deadlines.ReleaseAfter after
	releaseStopped    = "stopped"     // another scheduler's pod stopped running
)

var (
	filterRejections = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "filter_rejections_total",
		Help:           "Nodes (or, for invalid_annotation, ledger_not_synced and quota_exceeded, pods) BandwidthAware rejected, by reason.",
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

	placementsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      metricsSubsystem,
		Name:           "placements_total",
		Help:           "Pods requiring bandwidth that Reserve placed, by whether their node keeps the required rate (guaranteed=true: the node enforces the pod's network) or only measured it free.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"guaranteed"})

	registerOnce sync.Once
)

// registerMetrics registers the collectors once per process, however many profiles
// instantiate the plugin.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(filterRejections, reservationsGauge, reservedBytes, reservationsTotal, releasesTotal, placementsTotal)
		// Every reason at 0 from the start, so a rate over it is 0 rather than no data.
		for _, r := range []string{reasonInvalidAnnotation, reasonLedgerNotSynced, reasonNoReport, reasonStaleReport, reasonPartialReport,
			reasonUnknownCapacity, reasonNoNetwork, reasonIngress, reasonEgress, reasonOutsideWindow, reasonGuaranteeIngress, reasonGuaranteeEgress, reasonQuota} {
			filterRejections.WithLabelValues(r)
		}
		for _, r := range []string{releaseCovered, releaseUnreserved, releasePodGone} {
			releasesTotal.WithLabelValues(r)
		}
		for _, g := range []string{"true", "false"} {
			placementsTotal.WithLabelValues(g)
		}
		for _, s := range []string{"scheduled", "observed"} {
			reservationsTotal.WithLabelValues(s)
		}
		for _, d := range []string{"ingress", "egress"} {
			reservedBytes.WithLabelValues(d)
		}
	})
}

// staleReports counts, at each scrape, the nodes whose NodeBandwidth reached the ranker
// longer than staleAfter ago: agents that stopped writing, seen from the ranker, which
// still counts them when the agent's own metrics are gone with it.
type staleReports struct {
	metrics.BaseStableCollector
	desc       *metrics.Desc
	store      bandwidthLister
	staleAfter time.Duration
	now        func() time.Time
}

// bandwidthLister is the part of the heartbeat store the collector reads.
type bandwidthLister interface {
	EachBandwidth(func(node string, b *heartbeat.Bandwidth))
}

func newStaleReports(store bandwidthLister, staleAfter time.Duration, now func() time.Time) *staleReports {
	return &staleReports{
		desc: metrics.NewDesc(metricsSubsystem+"_stale_reports",
			"Nodes whose NodeBandwidth reached the ranker longer than staleAfter ago: they take no pods that require bandwidth.",
			nil, nil, metrics.ALPHA, ""),
		store: store, staleAfter: staleAfter, now: now,
	}
}

func (c *staleReports) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- c.desc }

func (c *staleReports) CollectWithStability(ch chan<- metrics.Metric) {
	now, stale := c.now(), 0
	c.store.EachBandwidth(func(_ string, b *heartbeat.Bandwidth) {
		if !b.Received.IsZero() && now.Sub(b.Received) > c.staleAfter {
			stale++
		}
	})
	ch <- metrics.NewLazyConstMetric(c.desc, metrics.GaugeValue, float64(stale))
}

var staleOnce sync.Once

// registerStaleReports registers the collector for the first profile's store and
// staleAfter; profiles share one store, and the chart configures one profile.
func registerStaleReports(store bandwidthLister, staleAfter time.Duration) {
	staleOnce.Do(func() {
		legacyregistry.CustomMustRegister(newStaleReports(store, staleAfter, time.Now))
	})
}
