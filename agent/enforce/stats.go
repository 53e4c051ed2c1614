package enforce

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// A pod did not get its guarantee when, for unmetSamples samples in a row, its class
// dropped packets (it wanted more than it got: a loss-based TCP flow fills its queue at
// any rate) while it sent less than unmetShare of its guarantee. One sample is not
// enough: the one a flow starts or ends in is short of it by the flow's own idle part.
const (
	unmetShare   = 0.95
	unmetSamples = 3
)

// classKey names one class of a network in one direction, on one of its interfaces.
type classKey struct {
	network   string
	iface     string
	direction Direction
	pod       types.UID // empty: the default class
}

// podKey is the class of a pod across the network's interfaces; the network's totals
// with pod empty.
func (k classKey) podKey() classKey {
	return classKey{network: k.network, direction: k.direction, pod: k.pod}
}

// classCounters are a class's counters on one interface.
type classCounters struct {
	bytes, drops, overlimits uint64
	backlog                  uint64
}

// trafficTotals are what one network's classes carried in one direction, in bytes:
// within pods' guarantees, beyond any class's own rate, and within the default class's.
type trafficTotals struct {
	guaranteed, borrowed, unreserved float64
}

// podClass is what the stats need of a pod's class in one direction.
type podClass struct {
	name      string // namespace/name
	guarantee uint64 // bits/s; 0: none
	ceil      uint64
}

// accounting turns successive class counters into the byte totals, each class's
// counters, and the pods whose guarantee was not met within the window.
type accounting struct {
	window  time.Duration
	last    map[classKey]classCounters
	lastAt  time.Time
	totals  map[classKey]*trafficTotals // by network and direction
	current map[classKey]classCounters
	unmetAt map[classKey]time.Time
	names   map[classKey]string
	// short counts, per pod class and interface, the samples in a row it fell short in.
	short map[classKey]int
}

func newAccounting(window time.Duration) *accounting {
	return &accounting{window: window, last: map[classKey]classCounters{}, totals: map[classKey]*trafficTotals{},
		unmetAt: map[classKey]time.Time{}, names: map[classKey]string{}, short: map[classKey]int{}}
}

// observe takes one sample of every class: counters by class, the rate each class had
// (bits/s), and the pods' classes (by podKey). It returns the pods (by podKey) newly
// found short of their guarantee.
func (a *accounting) observe(now time.Time, counters map[classKey]classCounters, rates map[classKey]uint64, pods map[classKey]podClass) []classKey {
	dt := now.Sub(a.lastAt).Seconds()
	first := a.lastAt.IsZero()
	var newlyUnmet []classKey
	for k, c := range counters {
		prev, seen := a.last[k]
		if first || !seen || c.bytes < prev.bytes {
			continue // no baseline yet, or the class was made again
		}
		sent := float64(c.bytes - prev.bytes)
		within := min(sent, float64(rates[k])/8*dt)
		tk := classKey{network: k.network, direction: k.direction}
		t := a.totals[tk]
		if t == nil {
			t = &trafficTotals{}
			a.totals[tk] = t
		}
		t.borrowed += sent - within
		if k.pod == "" {
			t.unreserved += within
			continue
		}
		pk := k.podKey()
		pc := pods[pk]
		if pc.guarantee == 0 {
			// A limit only: what it sends within its token rate is no guarantee.
			t.borrowed += within
			continue
		}
		t.guaranteed += within
		rate := sent * 8 / dt
		if c.drops > prev.drops && rate < unmetShare*float64(pc.guarantee) && rate < unmetShare*float64(pc.ceil) {
			a.short[k]++
		} else {
			delete(a.short, k)
		}
		if a.short[k] >= unmetSamples {
			if _, was := a.unmetAt[pk]; !was {
				newlyUnmet = append(newlyUnmet, pk)
			}
			a.unmetAt[pk] = now
			a.names[pk] = pc.name
		}
	}
	for k, at := range a.unmetAt {
		if now.Sub(at) >= a.window {
			delete(a.unmetAt, k)
			delete(a.names, k)
		}
	}
	for k := range a.short {
		if _, ok := counters[k]; !ok {
			delete(a.short, k)
		}
	}
	a.last, a.lastAt, a.current = counters, now, counters
	return newlyUnmet
}

// unmet returns the classes of pods whose guarantee was not met within the window, with
// the pods' names.
func (a *accounting) unmet() map[classKey]string {
	out := make(map[classKey]string, len(a.names))
	for k, n := range a.names {
		out[k] = n
	}
	return out
}
