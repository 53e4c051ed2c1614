// Package bandwidth is the BandwidthAware scheduler plugin (docs/design-contract.md,
// "Ranker"): it keeps
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
// For every direction with a required value the node needs a NodeBandwidth that is
// fresh and full (below), with a known remaining (capacity known), and remaining minus
// the ledger's reservations there ≥ required. Rejections are
// UnschedulableAndUnresolvable: evicting pods does not change what the node measured,
// so preemption is not attempted on bandwidth's behalf.
//
// # Fresh reports
//
// A report is fresh while no more than staleAfter (--bandwidth-stale-after, default
// 60s) has passed since it reached the ranker: the heartbeat store's informer event,
// on the ranker's clock (heartbeat.Bandwidth.Received). The agent's sampleTime plays
// no part, so an agent whose clock is wrong, or that lies, can neither keep its node
// fresh nor age it. A version of the object the ranker already holds, delivered again
// by a relist, keeps its first arrival; reports listed when the ranker starts count as
// arrived at the API server's last write of their status, when that is earlier.
// Agents write at least every 30s, so a node goes stale after two missed heartbeats.
//
// # Full reports
//
// A report is full when it has a sampleTime and its window (status.window, the span
// its peak covers) is at least minWindow (--bandwidth-min-window, default 60s, the
// agents' default --window). An agent publishes the window it actually observed: right
// after it starts, 3s since start rather than its configured 60s, and a peak over 3s
// misses the bursts a full window would have seen, so its remaining is too high. So:
//
//	full ⇔ sampleTime present ∧ window ≥ minWindow
//
// A report that is not full counts as no usable report for pods that require
// bandwidth: Filter rejects the node (reason partial_report), Score gives it 0 in each
// direction, and the ledger releases no reservation on it. The agent writes a report
// as soon as its window becomes full, so a restarted agent's node is eligible again
// one window after the agent started. minWindow must not exceed the agents' --window,
// or no report is ever full; 0 takes every report as full.
//
// # Poison
//
// A NodeBandwidth the heartbeat store cannot use (it does not decode, a figure is out of
// range, remaining exceeds capacity) makes its node one without a report, reason
// no_report; the store logs and counts it (sextant_ranker_heartbeat_rejected_total).
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
