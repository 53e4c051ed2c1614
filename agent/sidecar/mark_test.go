package sidecar

import (
	"testing"
	"time"
)

func TestStopMarkRoundTrip(t *testing.T) {
	m := stopMark{Requested: time.Unix(0, 1763805600123456789), Grace: 30 * time.Second}
	for _, recorded := range []bool{false, true} {
		m.Recorded = recorded
		got, err := parseStopMark(m.String())
		if err != nil || !got.Requested.Equal(m.Requested) || got.Grace != m.Grace || got.Recorded != recorded {
			t.Errorf("parse(%q) = %+v, %v; want %+v", m.String(), got, err, m)
		}
	}
	for _, bad := range []string{"", "v2:1:2", "v1:x:2", "v1:1:-3", "v1:1:2:done", "v1:1", "v1:1:9223372037"} {
		if _, err := parseStopMark(bad); err == nil {
			t.Errorf("parse(%q): no error", bad)
		}
	}
}
