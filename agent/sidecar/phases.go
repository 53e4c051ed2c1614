package sidecar

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The phases of one stop, the label of sextant_sidecar_stop_phase_seconds. One after
// another they span the last main container finishing to the stop recorded, so when a
// burst of finishing Jobs makes the last stops wait, the phase that waits shows where.
const (
	// phaseHeard: the last main container finished (the runtime's timestamp) → the agent
	// heard of it: the exit event arrived, or a pass over the pod found it first.
	phaseHeard = "heard"
	// phaseQueued: heard → a worker took up the pass over the pod that decided the stop.
	phaseQueued = "queued"
	// phaseDecided: that pass began → it decided to stop the sidecar (the pod's
	// containers read from the runtime, the rules applied).
	phaseDecided = "decided"
	// phaseConfirmed: decided → the CRI reports every main container exited, which a
	// native sidecar's stop waits for (unreportedExits); nothing for a regular one.
	phaseConfirmed = "confirmed"
	// phaseMarked: confirmed → the stop mark written to the agent's state directory, which
	// must come before the signal (see stop).
	phaseMarked = "marked"
	// phaseStopped: the stop sent → the sidecar exited: its own shutdown, then the
	// runtime's bookkeeping.
	phaseStopped = "stopped"
	// phaseRecorded: exited → the Event created and the mark saying so written.
	phaseRecorded = "recorded"
)

var phases = []string{phaseHeard, phaseQueued, phaseDecided, phaseConfirmed, phaseMarked, phaseStopped, phaseRecorded}

// stopTiming is when each phase of one stop ended, as far as it has come.
type stopTiming struct {
	mainFinished time.Time // the last main container's exit, the runtime's timestamp
	heard        time.Time
	taken        time.Time // the deciding pass began
	decided      time.Time
	confirmed    time.Time
	marked       time.Time
	stopped      time.Time
	recorded     time.Time
	// via says how the stop signal was sent (viaProcess, viaRuntime); empty when an
	// earlier agent sent it.
	via string
	// confirm are the main containers whose exits the CRI must report before the stop
	// signal (unreportedExits).
	confirm []string
}

// durations are the phases' lengths in the order of phases, false when the stop did not
// run them all: an adopted stop (an earlier agent began it), or a main container the
// runtime gave no exit time.
func (s stopTiming) durations() ([]time.Duration, bool) {
	ends := []time.Time{s.mainFinished, s.heard, s.taken, s.decided, s.confirmed, s.marked, s.stopped, s.recorded}
	out := make([]time.Duration, 0, len(phases))
	for i := 1; i < len(ends); i++ {
		if ends[i-1].IsZero() || ends[i].IsZero() {
			return nil, false
		}
		// The first phase compares the runtime's clock with the agent's, which on one
		// node are the same clock, read at different moments.
		out = append(out, max(ends[i].Sub(ends[i-1]), 0))
	}
	return out, true
}

// observe adds a finished stop's phases to the histogram; the log line of the stop
// carries the same figures for a timeline of a burst.
func (s stopTiming) observe(h *prometheus.HistogramVec) {
	d, ok := s.durations()
	if !ok {
		return
	}
	for i, p := range phases {
		h.WithLabelValues(p).Observe(d[i].Seconds())
	}
}

// logValues are the phases as key/value pairs for a log line, in milliseconds.
func (s stopTiming) logValues() []any {
	d, ok := s.durations()
	if !ok {
		return nil
	}
	kv := make([]any, 0, 2*len(phases))
	for i, p := range phases {
		kv = append(kv, p+"Ms", float64(d[i].Microseconds())/1000)
	}
	return kv
}
