package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"sextant.io/sextant/agent/bandwidth"
	"sextant.io/sextant/agent/topology"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/internal/delegatedauth"
	"sextant.io/sextant/internal/liveness"
)

func healthz(t *testing.T, loops *liveness.Checker) (int, string) {
	t.Helper()
	h := metricsHandler(prometheus.NewRegistry(), loops, func() bool { return true }, delegatedauth.New(reviewingAPIServer(), 0), 8)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return rec.Code, rec.Body.String()
}

func eventuallyHealth(t *testing.T, loops *liveness.Checker, wantCode int, wantPrefix string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := healthz(t, loops)
		if code == wantCode && strings.HasPrefix(body, wantPrefix) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz: %d %q, want %d %q", code, body, wantCode, wantPrefix)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func quiet() logr.Logger { return logr.Discard() }

// A NodeBandwidth write that never returns (a call that ignores its deadline) stops the
// reporter's loop: /healthz fails naming it, and recovers once the loop turns again.
func TestHealthzNamesAStuckReporter(t *testing.T) {
	const bound = 300 * time.Millisecond
	l := loop{every: 10 * time.Millisecond, beat: &liveness.Beat{}, now: time.Now, timeout: time.Hour, log: quiet()}
	var meterBeat liveness.Beat
	loops := liveness.NewChecker(nil)
	loops.Add("bandwidth-reporter", bound, l.beat.Last)
	loops.Add("bandwidth-meter", bound, meterBeat.Last)

	var hang atomic.Bool
	release := make(chan struct{})
	offer := func(context.Context, bandwidth.Snapshot) (bool, error) {
		if hang.Load() {
			<-release
		}
		return true, nil
	}
	snapshot := func() bandwidth.Snapshot { return bandwidth.Snapshot{Time: time.Now()} }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var written atomic.Bool
	done := make(chan struct{})
	go func() { defer close(done); l.publishBandwidth(ctx, snapshot, offer, &written) }()
	// The meter keeps sampling throughout.
	go func() {
		for ctx.Err() == nil {
			meterBeat.Mark(time.Now())
			time.Sleep(10 * time.Millisecond)
		}
	}()

	for deadline := time.Now().Add(5 * time.Second); !written.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no write counted")
		}
	}
	eventuallyHealth(t, loops, http.StatusOK, "ok\n")
	hang.Store(true)
	eventuallyHealth(t, loops, http.StatusServiceUnavailable, "stuck: bandwidth-reporter\n")
	hang.Store(false)
	close(release)
	eventuallyHealth(t, loops, http.StatusOK, "ok\n")
	cancel()
	<-done
}

// A write that hangs but honours its context is cut at the round's deadline, and the
// loop goes on: the reporter stays healthy.
func TestReporterRoundsHaveADeadline(t *testing.T) {
	l := loop{every: 10 * time.Millisecond, beat: &liveness.Beat{}, now: time.Now, timeout: 50 * time.Millisecond, log: quiet()}
	// Far longer than a round (10 ms, and a 50 ms deadline): stuck only if a round hangs.
	const limit = 2 * time.Second
	loops := liveness.NewChecker(nil)
	loops.Add("bandwidth-reporter", limit, l.beat.Last)
	var calls atomic.Int32
	offer := func(ctx context.Context, _ bandwidth.Snapshot) (bool, error) {
		calls.Add(1)
		<-ctx.Done()
		return false, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var written atomic.Bool
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		l.publishBandwidth(ctx, func() bandwidth.Snapshot { return bandwidth.Snapshot{Time: time.Now()} }, offer, &written)
	}()
	// Five writes tried, each cut at its deadline, and past the liveness limit.
	for calls.Load() < 5 || time.Since(start) <= limit {
		if time.Since(start) > 30*time.Second {
			cancel()
			<-done
			t.Fatalf("%d writes tried in 30s, want the loop to go on after each deadline", calls.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, body := healthz(t, loops)
	cancel()
	<-done
	if code != http.StatusOK {
		t.Errorf("/healthz with writes cut at their deadline: %d %q", code, body)
	}
	if written.Load() {
		t.Error("a failed write counted as written")
	}
}

// The topology loop reads at once, then every interval, beats each round whether the
// read or the write failed, and gives each write a deadline.
func TestTopologyLoop(t *testing.T) {
	l := loop{every: 10 * time.Millisecond, beat: &liveness.Beat{}, now: time.Now, timeout: 50 * time.Millisecond, log: quiet()}
	var reads, offers atomic.Int32
	read := func() (*topology.Snapshot, error) {
		if reads.Add(1)%2 == 0 {
			return nil, errors.New("sysfs went away")
		}
		return &topology.Snapshot{}, nil
	}
	var sawDeadline atomic.Bool
	offer := func(ctx context.Context, _ v1alpha1.Topology) (bool, error) {
		offers.Add(1)
		_, ok := ctx.Deadline()
		sawDeadline.Store(ok)
		return true, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); l.publishTopology(ctx, read, offer, "/") }()
	// Every other read fails: five reads take two writes, if the loop goes on after a
	// failed one.
	for reads.Load() < 5 || offers.Load() < 2 {
		if time.Since(start) > 30*time.Second {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if reads.Load() < 5 || offers.Load() < 2 {
		t.Errorf("%d reads and %d writes in %v at a 10ms interval", reads.Load(), offers.Load(), time.Since(start).Round(time.Millisecond))
	}
	if !sawDeadline.Load() {
		t.Error("a NodeTopology write without a deadline")
	}
	if !l.beat.Last().After(start) {
		t.Error("the topology loop never marked its beat")
	}
}
