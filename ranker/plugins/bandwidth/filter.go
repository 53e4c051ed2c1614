package bandwidth

import (
	"context"
	"fmt"
	"math"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/heartbeat"
)

// Filter drops the node unless, for every direction the pod requires, the node has a
// fresh, full NodeBandwidth whose remaining minus the ledger's reservations there is at
// least the required rate. A pod that names its network and requires no rate needs only
// a NodeBandwidth, fresh or not, that lists that network: which networks a node has is
// its agent's configuration, not a measurement that ages. A node the floor PreFilter
// found for the pod speaks for passes without its record being read (floor.go).
//
// The status message is fixed per reason (see message): kube-scheduler's
// FailedScheduling event counts nodes per distinct message, so figures in it would make
// one line per node, and formatting them for every rejected node would allocate in the
// per-node path (docs/design/0009-no-allocation-in-the-per-node-path.md). The node's
// figures are logged at V(5).
func (pl *BandwidthAware) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, ok := pl.podState(state, pod)
	if !ok || !s.req.Filtered() {
		return nil
	}
	node := nodeInfo.Node()
	if node == nil {
		return fwk.NewStatus(fwk.Error, "node not found")
	}
	if s.floor != nil && s.adjust == nil && s.floor.passes(nodeInfo, node) {
		return nil
	}
	rec := pl.reports.NodeOf(node)
	var report *heartbeat.Bandwidth
	var res networkReserved
	if s.req.HasRequired() {
		report, res = pl.ledger.reportAndReserved(rec, networkOf(s.req))
		if s.adjust != nil && s.adjust.node == node.Name {
			res = s.adjust.apply(res)
		}
	} else {
		report = rec.Bandwidth()
	}
	reason, _ := pl.check(s.req, report, res, s.now, false)
	if reason == "" {
		return nil
	}
	filterRejections.WithLabelValues(reason).Inc()
	if v := klog.FromContext(ctx).V(5); v.Enabled() {
		_, detail := pl.check(s.req, report, res, s.now, true)
		v.Info("BandwidthAware rejected the node", "pod", klog.KObj(pod), "node", node.Name, "reason", reason, "detail", detail)
	}
	return fwk.NewStatus(rejectionCode(reason), pl.message(reason, networkOf(s.req)))
}

// rejectionCode is Unschedulable where preempting lower-priority pods can make room
// (their reservations and guarantees: see RemovePod), and UnschedulableAndUnresolvable
// where it cannot (no usable report, no such network, capacity unknown, the best-fit
// window), so that preemption evicts nothing on such a node's behalf.
func rejectionCode(reason string) fwk.Code {
	switch reason {
	case reasonIngress, reasonEgress, reasonGuaranteeIngress, reasonGuaranteeEgress:
		return fwk.Unschedulable
	}
	return fwk.UnschedulableAndUnresolvable
}

// Rejection messages, one per reason (see Filter); the stale one is per plugin, as it
// names the plugin's stale-after.
const (
	msgNoReport        = "node(s) had no NodeBandwidth"
	msgUnknownCapacity = "node(s) reported no remaining bandwidth (capacity unknown) in a direction the pod requires"
	msgIngress         = "node(s) didn't have the pod's required ingress bandwidth remaining"
	msgEgress          = "node(s) didn't have the pod's required egress bandwidth remaining"
	msgOutsideWindow   = "node(s) had remaining bandwidth outside the pod's best-fit window (|remaining - expected| > expected - required; bestFitWindow strict)"
	msgGuaranteeIn     = "node(s) could not guarantee the pod's required ingress bandwidth: the guarantees of the pods there fill what the node keeps"
	msgGuaranteeEg     = "node(s) could not guarantee the pod's required egress bandwidth: the guarantees of the pods there fill what the node keeps"
)

// message is Filter's status message for reason, about network.
func (pl *BandwidthAware) message(reason, network string) string {
	switch reason {
	case reasonNoNetwork:
		// One message per network name: a handful at most in a cluster.
		return fmt.Sprintf("node(s) had no network %q (bandwidth.sextant.io/network)", network)
	case reasonNoReport:
		return msgNoReport
	case reasonStaleReport:
		return pl.msgStale
	case reasonPartialReport:
		return pl.msgPartial
	case reasonUnknownCapacity:
		return msgUnknownCapacity
	case reasonIngress:
		return msgIngress
	case reasonEgress:
		return msgEgress
	case reasonOutsideWindow:
		return msgOutsideWindow
	case reasonGuaranteeIngress:
		return msgGuaranteeIn
	case reasonGuaranteeEgress:
		return msgGuaranteeEg
	}
	return reason
}

func staleMessage(staleAfter time.Duration) string {
	return fmt.Sprintf("node(s) had no fresh NodeBandwidth (none received within stale-after %s)", staleAfter)
}

func partialMessage(minWindow time.Duration) string {
	return fmt.Sprintf("node(s) had only a partial NodeBandwidth (a window shorter than min-window %s: the agent has not measured that long yet)", minWindow)
}

// check returns the reason why a node with this report (nil: none) and these
// reservations and guarantees cannot take req at now, or "" if it can; with detail,
// also a message with the node's figures (for logs and tests: building it allocates).
//
// Where the node enforces the pod's network, the pod's required rate must also fit
// beside the guarantees the node keeps there: those of its pods, idle or not, are taken
// whatever the node measures (the ledger's admitLocked).
func (pl *BandwidthAware) check(req annotations.BandwidthRequest, report *heartbeat.Bandwidth, res networkReserved, now time.Time, detail bool) (reason, msg string) {
	if report == nil {
		return reasonNoReport, "node has no NodeBandwidth"
	}
	if !req.HasRequired() {
		// Only the named network to check (see Filter).
		switch {
		case report.Network(networkOf(req)) != nil:
			return "", ""
		case !detail:
			return reasonNoNetwork, ""
		}
		return reasonNoNetwork, fmt.Sprintf("node has no network %q", networkOf(req))
	}
	if pl.stale(report, now) {
		if !detail {
			return reasonStaleReport, ""
		}
		if report.Received.IsZero() {
			return reasonStaleReport, "NodeBandwidth never received"
		}
		return reasonStaleReport, fmt.Sprintf("NodeBandwidth is stale (received %s ago, stale after %s)",
			now.Sub(report.Received).Truncate(time.Second), pl.args.StaleAfter.Duration)
	}
	if pl.partial(report) {
		if !detail {
			return reasonPartialReport, ""
		}
		if report.SampleTime.IsZero() {
			return reasonPartialReport, "NodeBandwidth has no sampleTime"
		}
		return reasonPartialReport, fmt.Sprintf("NodeBandwidth is partial (window %s, min-window %s)", report.Window, pl.args.MinWindow.Duration)
	}
	network := report.Network(networkOf(req))
	if network == nil {
		if !detail {
			return reasonNoNetwork, ""
		}
		return reasonNoNetwork, fmt.Sprintf("node has no network %q", networkOf(req))
	}
	// The strict best-fit window (see Args.BestFitWindow) applies to best-fit pods only.
	window := pl.args.BestFitWindow == WindowStrict && pl.strategy(req) == annotations.BestFit
	dirs := [...]struct {
		name     string
		d        annotations.Direction
		reported int64
		known    bool
		reserved int64
		reason   string
	}{
		{"ingress", req.Ingress, network.IngressRemaining, network.IngressKnown, res.ingress, reasonIngress},
		{"egress", req.Egress, network.EgressRemaining, network.EgressKnown, res.egress, reasonEgress},
	}
	for _, dir := range dirs {
		if !dir.d.HasRequired {
			continue
		}
		if !dir.known {
			if !detail {
				return reasonUnknownCapacity, ""
			}
			return reasonUnknownCapacity, fmt.Sprintf("NodeBandwidth has no %s remaining (capacity unknown)", dir.name)
		}
		avail := dir.reported - dir.reserved
		if avail >= dir.d.Required {
			if !window || !dir.d.HasExpected || dir.d.Expected < dir.d.Required {
				continue
			}
			if dist, width := absDiff(avail, dir.d.Expected), dir.d.Expected-dir.d.Required; dist > width {
				if !detail {
					return reasonOutsideWindow, ""
				}
				return reasonOutsideWindow, fmt.Sprintf("%s remaining %s is %s from expected %s, more than expected - required %s",
					dir.name, annotations.FormatRate(avail), annotations.FormatRate(dist), annotations.FormatRate(dir.d.Expected), annotations.FormatRate(width))
			}
			continue
		}
		switch {
		case !detail:
			return dir.reason, ""
		case dir.reserved > 0:
			// Reservations can exceed what was reported (expected > required); say 0.
			return dir.reason, fmt.Sprintf("%s remaining %s (%s reported - %s reserved) < required %s",
				dir.name, annotations.FormatRate(max(avail, 0)), annotations.FormatRate(dir.reported), annotations.FormatRate(dir.reserved), annotations.FormatRate(dir.d.Required))
		default:
			return dir.reason, fmt.Sprintf("%s remaining %s < required %s", dir.name, annotations.FormatRate(avail), annotations.FormatRate(dir.d.Required))
		}
	}
	if !network.Enforced() {
		return "", ""
	}
	for _, g := range [...]struct {
		name                 string
		d                    annotations.Direction
		guaranteed, capacity int64
		reason               string
	}{
		{"ingress", req.Ingress, res.guaranteedIn, network.Guarantee.Ingress, reasonGuaranteeIngress},
		{"egress", req.Egress, res.guaranteedEg, network.Guarantee.Egress, reasonGuaranteeEgress},
	} {
		if !g.d.HasRequired || g.d.Required <= g.capacity-g.guaranteed {
			continue
		}
		if !detail {
			return g.reason, ""
		}
		return g.reason, fmt.Sprintf("%s guarantees %s of %s taken, required %s does not fit", g.name,
			annotations.FormatRate(g.guaranteed), annotations.FormatRate(g.capacity), annotations.FormatRate(g.d.Required))
	}
	return "", ""
}

// strategy is the pod's own strategy, else the plugin's default.
func (pl *BandwidthAware) strategy(req annotations.BandwidthRequest) annotations.Strategy {
	if req.Strategy != "" {
		return req.Strategy
	}
	return pl.args.Strategy
}

// absDiff is |a - b| for rates (non-negative int64s, or a negative available after
// reservations), saturating instead of overflowing.
func absDiff(a, b int64) int64 {
	d := a - b
	if (d < 0) != (a < b) {
		return math.MaxInt64
	}
	if d < 0 {
		return -d
	}
	return d
}

// stale reports whether the report reached the ranker too long before now to trust.
// The arrival is on the ranker's clock: an agent's clock, wrong or lying, neither
// keeps its node's report fresh nor ages it.
func (pl *BandwidthAware) stale(report *heartbeat.Bandwidth, now time.Time) bool {
	return report.Received.IsZero() || now.Sub(report.Received) > pl.args.StaleAfter.Duration
}

// partial reports whether the report is not yet a full one (see the package doc).
func (pl *BandwidthAware) partial(report *heartbeat.Bandwidth) bool {
	return !full(report, pl.args.MinWindow.Duration)
}

// full reports whether report says when it was sampled and its peak spans at least
// minWindow: after an agent starts, its peak has seen only the seconds since, and
// the remaining it reports is too high by whatever burst it has not seen yet.
func full(report *heartbeat.Bandwidth, minWindow time.Duration) bool {
	return !report.SampleTime.IsZero() && report.Window >= minWindow
}

// available returns, per direction, the remaining on network minus reservations of the
// node's fresh report at now; a direction is not ok when the node has no usable report
// for it, or no such network.
func (pl *BandwidthAware) available(rec *heartbeat.Node, network string, now time.Time) (ingress, egress avail) {
	report, res := pl.ledger.reportAndReserved(rec, network)
	nw := pl.usableNetwork(report, network, now)
	if nw == nil {
		return avail{}, avail{}
	}
	if nw.IngressKnown {
		ingress = avail{bits: nw.IngressRemaining - res.ingress, ok: true}
	}
	if nw.EgressKnown {
		egress = avail{bits: nw.EgressRemaining - res.egress, ok: true}
	}
	return ingress, egress
}

// usableNetwork returns network of report (nil: none) if the report is fresh at now and
// full, nil otherwise.
func (pl *BandwidthAware) usableNetwork(report *heartbeat.Bandwidth, network string, now time.Time) *heartbeat.Network {
	if report == nil || pl.stale(report, now) || pl.partial(report) {
		return nil
	}
	return report.Network(network)
}
