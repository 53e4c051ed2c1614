package sidecar

import (
	"strings"
	"testing"
)

// FuzzStopMark: a stop mark is read back from a containerd label, which anyone with the
// socket, and any image, can write. Whatever it holds, parsing never panics, a mark
// that parses is the container's own, and it prints as a mark that parses to the same
// values (what a restarted agent relies on).
func FuzzStopMark(f *testing.F) {
	const id = "c0ffee"
	for _, s := range []string{
		"v2:c0ffee:1763805600123456789:30", "v2:c0ffee:1763805600123456789:30:recorded", "v2:c0ffee:0:2", "v2:c0ffee:-1:2",
		"", "v2", "v2:c0ffee", "v2:c0ffee:1", "v2:c0ffee:x:2", "v2:c0ffee:1:-3", "v2:c0ffee:1:0", "v2:c0ffee:1:2:done",
		"v2:c0ffee:1:2:recorded:x", "v2:other:1:2", "v2::1:2", "v1:1:2", "v1:1:2:recorded", "v3:c0ffee:1:2",
		"v2:c0ffee:+5:3", "v2:c0ffee:9223372036854775807:2305843009", "v2:c0ffee:1:2305843010", "v2:c0ffee:-9223372036854775808:2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseStopMark(s, id)
		if err != nil {
			return
		}
		if m.ID != id {
			t.Fatalf("parse(%q) for %s: a mark of %q", s, id, m.ID)
		}
		if _, err := parseStopMark(s, id+"0"); err == nil {
			t.Fatalf("parse(%q) reads as the mark of two containers", s)
		}
		if m.Grace <= 0 {
			t.Fatalf("parse(%q): grace %v", s, m.Grace)
		}
		out := m.String()
		back, err := parseStopMark(out, id)
		if err != nil {
			t.Fatalf("parse(%q) = %+v prints %q, which does not parse: %v", s, m, out, err)
		}
		if back != m && (!back.Requested.Equal(m.Requested) || back.Grace != m.Grace || back.Recorded != m.Recorded || back.ID != m.ID) {
			t.Fatalf("parse(%q) = %+v, printed %q, parsed back %+v", s, m, out, back)
		}
		if back.String() != out {
			t.Fatalf("printing is not stable: %q then %q", out, back.String())
		}
		if strings.HasSuffix(s, ":recorded") != m.Recorded {
			t.Fatalf("parse(%q): recorded %v", s, m.Recorded)
		}
	})
}
