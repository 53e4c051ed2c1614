// Package bandwidth is the BandwidthAware scheduler plugin (DESIGN.md "Ranker"): it keeps
// pods off nodes whose measured remaining bandwidth, minus the reservations of pods
// placed since, is below what the pod requires, and ranks the rest by the pod's
// strategy, per direction, combined with the ingress/egress weights.
//
// Register it with app.WithPlugin(bandwidth.Name, bandwidth.New) and enable it at
// multiPoint: PreFilter, Filter, PreScore, Score, Reserve, the queueing hints and the
// batching signature belong together (Score reads what PreScore computed).
//
// # Pods it ignores
//
// A pod without any bandwidth.sextant.io/ annotation makes PreFilter and PreScore return
// Skip, so Filter and Score do not run for it and it is placed as vanilla kube-scheduler
// would place it. A pod with only expected values (no required) is not filtered, only
// scored and reserved; a pod with only a strategy is not affected.
//
// # Malformed annotations
//
// annotations.ParseBandwidth (shared with the webhook and the agent) reports every malformed
// annotation, any unknown key under bandwidth.sextant.io/ (a typo would otherwise be
// silently ignored), and expected < required. PreFilter turns that into
// UnschedulableAndUnresolvable with the message, which the scheduler records in the
// pod's FailedScheduling event; the pod is retried when its annotations change.
//
// # Filter
//
// For every direction with a required value the node needs a NodeBandwidth sampled no
// longer than staleAfter ago, with a known remaining (capacity known), and remaining
// minus the ledger's reservations there ≥ required. Rejections are
// UnschedulableAndUnresolvable: evicting pods does not change what the node measured,
// so preemption is not attempted on bandwidth's behalf.
//
// # Score
//
// Per direction with a target (expected, else required) and a non-zero weight, where
// available = remaining − reservations:
//
//	best-fit:      1 − |available − target| / (largest such distance among the nodes)
//	most-headroom: available / (largest available among the nodes)
//
// A node without a usable report scores 0 in that direction. The directions combine as
// the weighted mean, scaled to [0, MaxNodeScore]; NormalizeScore then stretches so the
// best node gets MaxNodeScore, keeping ratios (not min-max: a 1M difference between two
// 900M nodes must not become a 100-point one).
//
// # Args and flags
//
// Precedence: built-in defaults < --bandwidth-* flags (RegisterFlags) < the profile's
// pluginConfig args. Only the fields present in the args override the flags.
//
// # Ledger
//
// See Ledger for the reservation rule. Metrics (legacy registry, served on the
// scheduler's /metrics): sextant_ranker_bandwidth_filter_rejections_total{reason},
// sextant_ranker_bandwidth_reservations, sextant_ranker_bandwidth_reserved_bytes_per_second{direction},
// sextant_ranker_bandwidth_reservations_total{source}, and
// sextant_ranker_bandwidth_reservation_releases_total{reason}.
package bandwidth
