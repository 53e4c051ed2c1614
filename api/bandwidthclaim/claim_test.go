package bandwidthclaim

import (
	"testing"
	"time"
)

func TestStageAt(t *testing.T) {
	bound := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return bound.Add(d) }
	both := Deadlines{ReduceAfter: 2 * time.Minute, ReleaseAfter: 5 * time.Minute}
	for _, c := range []struct {
		name     string
		d        Deadlines
		started  time.Time
		now      time.Time
		want     Stage
		wantNext time.Time
	}{
		{"just bound", both, time.Time{}, at(0), Full, at(2 * time.Minute)},
		{"reduced", both, time.Time{}, at(2 * time.Minute), RequiredOnly, at(5 * time.Minute)},
		{"released", both, time.Time{}, at(5 * time.Minute), Released, time.Time{}},
		{"started late", both, at(6 * time.Minute), at(7 * time.Minute), Full, time.Time{}},
		{"never", Deadlines{}, time.Time{}, at(time.Hour), Full, time.Time{}},
		{"release only", Deadlines{ReleaseAfter: 5 * time.Minute}, time.Time{}, at(time.Minute), Full, at(5 * time.Minute)},
		{"reduce only", Deadlines{ReduceAfter: 2 * time.Minute}, time.Time{}, at(time.Hour), RequiredOnly, time.Time{}},
	} {
		got, next := c.d.StageAt(bound, c.started, c.now)
		if got != c.want || !next.Equal(c.wantNext) {
			t.Errorf("%s: %s next %s, want %s next %s", c.name, got, next, c.want, c.wantNext)
		}
	}
}

func TestOrder(t *testing.T) {
	bound := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	d := Deadlines{ReleaseAfter: 5 * time.Minute}
	if got := d.Order(bound, bound.Add(4*time.Minute)); !got.Equal(bound) {
		t.Errorf("started before its release: ordered at %s, want when bound", got)
	}
	if got := d.Order(bound, bound.Add(6*time.Minute)); !got.Equal(bound.Add(6 * time.Minute)) {
		t.Errorf("started after its release: ordered at %s, want when started", got)
	}
	if got := (Deadlines{}).Order(bound, bound.Add(time.Hour)); !got.Equal(bound) {
		t.Errorf("without deadlines: ordered at %s, want when bound", got)
	}
}
