package bandwidth

import "time"

// Count is a cumulative counter pair as the eBPF programs keep it.
type Count struct {
	Bytes   uint64
	Packets uint64
}

// tracker turns one direction's cumulative counters into a rate and the peak
// rate over a sliding window.
type tracker struct {
	window time.Duration

	have  bool
	first time.Time // the first observation: the peak covers no time before it
	last  time.Time
	count Count

	haveRate bool
	rate     float64 // bits/s over the last interval
	// peaks holds the rates of the window in time order with strictly
	// decreasing values (a monotonic queue): the front is the window's peak,
	// and each sample costs amortised O(1) however long the window is.
	peaks []point
}

type point struct {
	t    time.Time
	rate float64
}

func (tr *tracker) observe(now time.Time, c Count) {
	switch {
	case !tr.have:
		tr.first = now
	case !now.After(tr.last):
		return // clock did not move (or went back): no interval to divide by
	case c.Bytes < tr.count.Bytes || c.Packets < tr.count.Packets:
		// The counters restarted (programs reloaded, ifindex reused): the
		// new values are a fresh baseline, not a negative rate.
	default:
		rate := float64(c.Bytes-tr.count.Bytes) * 8 / now.Sub(tr.last).Seconds()
		tr.rate, tr.haveRate = rate, true
		for len(tr.peaks) > 0 && tr.peaks[len(tr.peaks)-1].rate <= rate {
			tr.peaks = tr.peaks[:len(tr.peaks)-1]
		}
		tr.peaks = append(tr.peaks, point{now, rate})
	}
	tr.have, tr.last, tr.count = true, now, c
	tr.expire(now)
}

// expire drops rates measured at or before now-window.
func (tr *tracker) expire(now time.Time) {
	cut := now.Add(-tr.window)
	i := 0
	for i < len(tr.peaks) && !tr.peaks[i].t.After(cut) {
		i++
	}
	tr.peaks = tr.peaks[i:]
}

func (tr *tracker) peak() float64 {
	if len(tr.peaks) == 0 {
		return 0
	}
	return tr.peaks[0].rate
}
