package sidecar

import (
	"testing"
	"time"

	"sextant.io/sextant/api/sidecarrules"
)

func TestStopMarkRoundTrip(t *testing.T) {
	const id = "4f1c2e"
	for _, grace := range []time.Duration{sidecarrules.MinGracePeriod, 30 * time.Second, sidecarrules.MaxGracePeriod} {
		m := stopMark{ID: id, Requested: time.Unix(0, 1763805600123456789), Grace: grace}
		for _, recorded := range []bool{false, true} {
			m.Recorded = recorded
			got, err := parseStopMark(m.String(), id)
			if err != nil || got.ID != id || !got.Requested.Equal(m.Requested) || got.Grace != m.Grace || got.Recorded != recorded {
				t.Errorf("parse(%q) = %+v, %v; want %+v", m.String(), got, err, m)
			}
		}
	}
	for _, bad := range []string{"", "v3:4f1c2e:1:2", "v2:4f1c2e:x:2", "v2:4f1c2e:1:-3", "v2:4f1c2e:1:2:done", "v2:4f1c2e:1",
		"v2:4f1c2e:1:2305843010", "v2:4f1c2e:1:9223372037", "v2:4f1c2e:1:0", "v2:4f1c2e:1:1",
		// Not this container's: another's, none, or a v1 mark, which names none.
		"v2:4f1c2e0:1:30", "v2:4f1c2:1:30", "v2::1:30", "v1:1:30", "v1:1:30:recorded"} {
		if _, err := parseStopMark(bad, id); err == nil {
			t.Errorf("parse(%q): no error", bad)
		}
	}
}
