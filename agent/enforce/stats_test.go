package enforce

import (
	"testing"
	"time"
)

func TestAccounting(t *testing.T) {
	const mb = 1_000_000
	pod := classKey{network: "pod", iface: "eth0", direction: Egress, pod: "a"}
	def := classKey{network: "pod", iface: "eth0", direction: Egress}
	capped := classKey{network: "pod", iface: "eth0", direction: Egress, pod: "b"}
	rates := map[classKey]uint64{pod: 400e6, def: 550e6, capped: minClassRate}
	pods := map[classKey]podClass{
		pod.podKey():    {name: "ns/a", guarantee: 400e6, ceil: 950e6},
		capped.podKey(): {name: "ns/b", ceil: 100e6},
	}
	a := newAccounting(10 * time.Second)
	at := t0
	step := func(bytesPod, dropsPod, bytesDef, bytesCapped uint64) []classKey {
		at = at.Add(time.Second)
		return a.observe(at, map[classKey]classCounters{
			pod: {bytes: bytesPod, drops: dropsPod}, def: {bytes: bytesDef}, capped: {bytes: bytesCapped},
		}, rates, pods)
	}
	step(0, 0, 0, 0) // the baseline
	// One second: the pod sends 60 MB (480 Mbit/s, 80 over its 400), the default class
	// 10 MB within its 550, the capped pod 5 MB (all borrowed: it guarantees nothing).
	if newly := step(60*mb, 0, 10*mb, 5*mb); len(newly) != 0 {
		t.Fatalf("unmet %v while every class got its rate", newly)
	}
	tot := a.totals[classKey{network: "pod", direction: Egress}]
	if tot == nil || tot.guaranteed != 50*mb || tot.borrowed != 15*mb || tot.unreserved != 10*mb {
		t.Fatalf("totals %+v, want 50 MB guaranteed, 15 MB borrowed, 10 MB unreserved", tot)
	}

	// Dropping while sending 20 MB/s (160 Mbit/s, under 95% of 400): unmet from the
	// third such second on, reported once.
	bytes, drops := uint64(60*mb), uint64(0)
	short := func() []classKey {
		bytes += 20 * mb
		drops += 10
		return step(bytes, drops, 10*mb, 5*mb)
	}
	if newly := short(); len(newly) != 0 {
		t.Fatalf("unmet after one short second: %v", newly)
	}
	if newly := short(); len(newly) != 0 {
		t.Fatalf("unmet after two short seconds: %v", newly)
	}
	if newly := short(); len(newly) != 1 || newly[0] != pod.podKey() {
		t.Fatalf("after three short seconds: newly unmet %v, want the pod", newly)
	}
	if newly := short(); len(newly) != 0 {
		t.Fatalf("reported again: %v", newly)
	}
	if u := a.unmet(); len(u) != 1 || u[pod.podKey()] != "ns/a" {
		t.Fatalf("unmet %v, want ns/a", u)
	}
	// Short without drops (the pod asks for less), then the window passes: no longer unmet.
	for range 11 {
		bytes += 10 * mb
		step(bytes, drops, 10*mb, 5*mb)
	}
	if u := a.unmet(); len(u) != 0 {
		t.Fatalf("unmet %v after the window", u)
	}
	// Dropping at its guarantee or above (a TCP flow fills its queue) is no shortfall.
	for range 5 {
		bytes += 50 * mb
		drops += 10
		if newly := step(bytes, drops, 10*mb, 5*mb); len(newly) != 0 {
			t.Fatalf("unmet %v at the guarantee", newly)
		}
	}
	// A class made again (its counters restart) is a new baseline, not negative traffic.
	before := *a.totals[classKey{network: "pod", direction: Egress}]
	step(1*mb, 0, 10*mb, 5*mb)
	if after := *a.totals[classKey{network: "pod", direction: Egress}]; after.guaranteed != before.guaranteed {
		t.Errorf("a restarted class counted: %+v then %+v", before, after)
	}
}
