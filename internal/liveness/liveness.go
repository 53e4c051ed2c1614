// Package liveness lets the agent's long-running loops show that they still turn, and
// its /healthz say which one does not.
//
// A loop marks its Beat each time round, including rounds that only find the world not
// ready yet (no kubelet cgroups, an API server that refuses): a loop that waits and
// retries is alive, and restarting the agent would not make the world ready. A loop is
// stuck when it stops coming back to its top: a call without a deadline that never
// returns, a deadlock, a worker pool all blocked. Restarting is the cure for that, so
// /healthz, the kubelet's liveness probe, fails on it and names the loop.
//
// Loops that work from a queue put ProbeKey in it on each resync and mark the beat when
// a worker takes it out: the beat then shows the whole path, ticker, queue and a
// worker, turning.
package liveness

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ProbeKey is a work-queue key that names no object (object keys are namespace/name).
const ProbeKey = "\x00liveness-probe"

// Beat is the time a loop last came round. The zero Beat has never beaten.
type Beat struct{ ns atomic.Int64 }

// Mark records that the loop came round at now.
func (b *Beat) Mark(now time.Time) { b.ns.Store(now.UnixNano()) }

// Last is when the loop last came round; zero if never.
func (b *Beat) Last() time.Time {
	ns := b.ns.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Slack is added to three intervals of a loop to make its bound: room for the calls
// one round makes (to the API server, to the runtime) to fail by their own deadlines
// and back off, before the loop counts as stuck.
const Slack = time.Minute

// Bound is how long a loop that should come round every interval may go without.
func Bound(interval time.Duration) time.Duration { return 3*interval + Slack }

// Checker knows the agent's loops.
type Checker struct {
	now func() time.Time

	mu    sync.Mutex
	loops []loop
}

type loop struct {
	name    string
	bound   time.Duration
	last    func() time.Time
	started time.Time
}

// NewChecker makes a checker; now is time.Now unless a test passes its own.
func NewChecker(now func() time.Time) *Checker {
	if now == nil {
		now = time.Now
	}
	return &Checker{now: now}
}

// Add registers a loop: it is stuck once last() (or, before its first beat, the time
// of Add) is more than bound ago.
func (c *Checker) Add(name string, bound time.Duration, last func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loops = append(c.loops, loop{name: name, bound: bound, last: last, started: c.now()})
}

// Status is one loop's state.
type Status struct {
	Name  string
	Since time.Duration // since it last came round (or was added, before its first round)
	Bound time.Duration
	Stuck bool
}

func (s Status) String() string {
	verdict := "ok"
	if s.Stuck {
		verdict = "STUCK"
	}
	return fmt.Sprintf("%s %s: last came round %s ago (bound %s)", verdict, s.Name, s.Since.Round(time.Millisecond), s.Bound)
}

// Check returns every loop's state, by name.
func (c *Checker) Check() []Status {
	c.mu.Lock()
	loops := slices.Clone(c.loops)
	c.mu.Unlock()
	now := c.now()
	out := make([]Status, 0, len(loops))
	for _, l := range loops {
		last := l.last()
		if last.Before(l.started) {
			last = l.started
		}
		since := max(now.Sub(last), 0)
		out = append(out, Status{Name: l.name, Since: since, Bound: l.bound, Stuck: since > l.bound})
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ServeHTTP answers 200 when no loop is stuck and 503 naming the stuck ones otherwise;
// the body lists every loop either way.
func (c *Checker) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	var stuck []string
	var b strings.Builder
	for _, s := range c.Check() {
		if s.Stuck {
			stuck = append(stuck, s.Name)
		}
		b.WriteString(s.String())
		b.WriteByte('\n')
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if len(stuck) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "stuck: %s\n%s", strings.Join(stuck, ", "), b.String())
		return
	}
	fmt.Fprintf(w, "ok\n%s", b.String())
}
