package bandwidth

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/ranker/heartbeat"
)

// Filter drops the node unless, for every direction the pod requires, the node has a
// fresh NodeBandwidth whose remaining minus the ledger's reservations there is at least
// the required rate.
func (pl *BandwidthAware) Filter(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, ok := pl.podState(state, pod)
	if !ok || !s.req.HasRequired() {
		return nil
	}
	node := nodeInfo.Node()
	if node == nil {
		return fwk.NewStatus(fwk.Error, "node not found")
	}
	rec := pl.reports.NodeOf(node)
	report := rec.Bandwidth()
	var resIn, resEg int64
	if report != nil {
		resIn, resEg = pl.ledger.reservedOn(rec)
	}
	reason, msg := pl.check(s.req, report, resIn, resEg, s.now)
	if reason == "" {
		return nil
	}
	filterRejections.WithLabelValues(reason).Inc()
	// Unresolvable: preempting pods does not change what the node measured, so
	// preemption must not evict anything on the node's behalf.
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msg)
}

// check returns the reason label and message why a node with this report (nil: none)
// and these reservations cannot take req at now, or "" if it can.
func (pl *BandwidthAware) check(req Request, report *heartbeat.Bandwidth, resIn, resEg int64, now time.Time) (reason, msg string) {
	if report == nil {
		return reasonNoReport, "node has no NodeBandwidth"
	}
	if stale, m := pl.stale(report, now); stale {
		return reasonStaleReport, m
	}
	dirs := [...]struct {
		name     string
		d        Direction
		reported int64
		known    bool
		reserved int64
		reason   string
	}{
		{"ingress", req.Ingress, report.IngressRemaining, report.IngressKnown, resIn, reasonIngress},
		{"egress", req.Egress, report.EgressRemaining, report.EgressKnown, resEg, reasonEgress},
	}
	for _, dir := range dirs {
		if !dir.d.HasRequired {
			continue
		}
		if !dir.known {
			return reasonUnknownCapacity, fmt.Sprintf("NodeBandwidth has no %s remaining (capacity unknown)", dir.name)
		}
		if avail := dir.reported - dir.reserved; avail < dir.d.Required {
			if dir.reserved > 0 {
				// Reservations can exceed what was reported (expected > required); say 0.
				return dir.reason, fmt.Sprintf("%s remaining %s (%s reported - %s reserved) < required %s",
					dir.name, formatRate(max(avail, 0)), formatRate(dir.reported), formatRate(dir.reserved), formatRate(dir.d.Required))
			}
			return dir.reason, fmt.Sprintf("%s remaining %s < required %s", dir.name, formatRate(avail), formatRate(dir.d.Required))
		}
	}
	return "", ""
}

// stale reports whether the report is too old to trust at now, with the message saying
// so.
func (pl *BandwidthAware) stale(report *heartbeat.Bandwidth, now time.Time) (bool, string) {
	if report.SampleTime.IsZero() {
		return true, "NodeBandwidth has no sampleTime"
	}
	age := now.Sub(report.SampleTime)
	if age > pl.args.StaleAfter.Duration {
		return true, fmt.Sprintf("NodeBandwidth is stale (sampled %s ago, stale after %s)",
			age.Truncate(time.Second), pl.args.StaleAfter.Duration)
	}
	return false, ""
}

// available returns, per direction, the reported remaining minus reservations of the
// node's fresh report at now; a direction is not ok when the node has no usable report
// for it.
func (pl *BandwidthAware) available(rec *heartbeat.Node, now time.Time) (ingress, egress avail) {
	report := rec.Bandwidth()
	if report == nil {
		return avail{}, avail{}
	}
	if stale, _ := pl.stale(report, now); stale {
		return avail{}, avail{}
	}
	in, eg := pl.ledger.reservedOn(rec)
	if report.IngressKnown {
		ingress = avail{bits: report.IngressRemaining - in, ok: true}
	}
	if report.EgressKnown {
		egress = avail{bits: report.EgressRemaining - eg, ok: true}
	}
	return ingress, egress
}
