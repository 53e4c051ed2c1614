package liveness

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeClock) step(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
}

func get(t *testing.T, c *Checker) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return rec.Code, rec.Body.String()
}

func TestCheckerNamesTheStuckLoop(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_763_805_600, 0)}
	c := NewChecker(clk.now)
	var meter, reporter Beat
	c.Add("meter", Bound(time.Second), meter.Last)
	c.Add("reporter", Bound(10*time.Second), reporter.Last)
	if code, body := get(t, c); code != http.StatusOK || !strings.HasPrefix(body, "ok\n") {
		t.Fatalf("fresh loops: %d %q, want 200 ok", code, body)
	}
	// Never beaten: counted from registration.
	clk.step(Bound(time.Second) + time.Second)
	code, body := get(t, c)
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "stuck: meter\n") {
		t.Fatalf("a meter that never came round: %d %q, want 503 naming meter only", code, body)
	}
	meter.Mark(clk.now())
	reporter.Mark(clk.now())
	if code, body := get(t, c); code != http.StatusOK {
		t.Fatalf("both came round: %d %q", code, body)
	}
	// The meter keeps beating, the reporter stops.
	for range 100 {
		clk.step(time.Second)
		meter.Mark(clk.now())
	}
	code, body = get(t, c)
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "stuck: reporter\n") ||
		!strings.Contains(body, "STUCK reporter: last came round 1m40s ago (bound 1m30s)") || !strings.Contains(body, "ok meter:") {
		t.Fatalf("a stuck reporter: %d %q", code, body)
	}
	reporter.Mark(clk.now())
	if code, body := get(t, c); code != http.StatusOK {
		t.Fatalf("the reporter came round again: %d %q", code, body)
	}
}

func TestBeat(t *testing.T) {
	var b Beat
	if !b.Last().IsZero() {
		t.Errorf("a new beat last came round at %v", b.Last())
	}
	at := time.Unix(1_763_805_600, 123)
	b.Mark(at)
	if !b.Last().Equal(at) {
		t.Errorf("Last = %v, want %v", b.Last(), at)
	}
	if Bound(time.Second) != 3*time.Second+Slack {
		t.Errorf("Bound(1s) = %v", Bound(time.Second))
	}
}
