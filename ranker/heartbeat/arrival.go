package heartbeat

import (
	"time"

	"sextant.io/sextant/api/v1alpha1"
)

// lateAllowance is how much longer than the node's previous report a report may take
// from its status write to the ranker before it counts as delivered late (dateReport):
// above the jitter of watch latency and of the write time's whole seconds, below any
// staleAfter worth setting.
const lateAllowance = 5 * time.Second

// dateReport is when a report counts as received (Bandwidth.Received): one written at
// written (the API server's clock; zero when unknown) that reached the ranker at
// received (the ranker's clock), prev being the node's current report (nil: none);
// initial says it comes from the list the informer started with.
//
// A watch event says nothing of whether it is prompt or replays a relist, and the two
// clocks may differ by any amount, so the write time alone cannot date a report: a
// skewed clock would age every report. The node's previous report measures the offset
// plus the usual latency (its delay); a report whose own delay exceeds that by more
// than lateAllowance waited somewhere (a watch break) and is dated by its write plus
// the previous delay. A previous report delivered late itself sets a long delay, so a
// second late delivery in a row is under-corrected; a steady delay, whatever its cause,
// is taken as normal from the next report on, so a clock step ages one report at most.
func dateReport(prev *Bandwidth, written, received time.Time, initial bool) time.Time {
	switch {
	case written.IsZero():
		return received
	case initial:
		// Listed at start: it arrived at some unknown time before.
		return minTime(written, received)
	case prev == nil || prev.written.IsZero() || prev.Arrived.IsZero():
		// Nothing to measure the delay against: a write that looks old may be skew.
		return received
	}
	prevDelay := prev.Arrived.Sub(prev.written)
	if received.Sub(written)-prevDelay <= lateAllowance {
		return received
	}
	return written.Add(prevDelay)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// statusWritten is the time of the status write storeBandwidth kept, zero if none.
func statusWritten(nbw *v1alpha1.NodeBandwidth) time.Time {
	for _, e := range nbw.ManagedFields {
		if e.Subresource == "status" && e.Time != nil {
			return e.Time.Time
		}
	}
	return time.Time{}
}
