package sidecar

import (
	"testing"
	"time"
)

func TestStopTimingDurations(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	full := stopTiming{mainFinished: at(0), heard: at(3), taken: at(10), decided: at(14), confirmed: at(16), marked: at(20), stopped: at(45), recorded: at(51)}
	d, ok := full.durations()
	want := []time.Duration{3, 7, 4, 2, 4, 25, 6}
	if !ok || len(d) != len(want) {
		t.Fatalf("durations = %v, %v; want %v", d, ok, want)
	}
	for i := range want {
		if d[i] != want[i]*time.Millisecond {
			t.Errorf("phase %s = %v, want %v", phases[i], d[i], want[i]*time.Millisecond)
		}
	}
	// An adopted stop has no decision of this process's, nor its marking and stopping.
	adopted := stopTiming{mainFinished: at(0), recorded: at(51)}
	if d, ok := adopted.durations(); ok {
		t.Errorf("adopted stop: durations %v, want none", d)
	}
	if kv := adopted.logValues(); kv != nil {
		t.Errorf("adopted stop: log values %v, want none", kv)
	}
	// The agent's clock read before the runtime's timestamp: no negative phase.
	early := full
	early.heard = at(-2)
	if d, _ := early.durations(); d[0] != 0 {
		t.Errorf("heard before the runtime's exit time: %v, want 0", d[0])
	}
}
