package sidecar

import (
	"strings"
	"testing"
)

// FuzzStopMark: a stop mark is read back from a containerd label, which anyone with the
// socket can write. Whatever it holds, parsing never panics, and a mark that parses
// prints as a mark that parses to the same values (what a restarted agent relies on).
func FuzzStopMark(f *testing.F) {
	for _, s := range []string{
		"v1:1763805600123456789:30", "v1:1763805600123456789:30:recorded", "v1:0:0", "v1:-1:0",
		"", "v1", "v1:1", "v1:x:2", "v1:1:-3", "v1:1:2:done", "v1:1:2:recorded:x", "v2:1:2",
		"v1:+5:3", "v1:9223372036854775807:9223372036", "v1:1:9223372037", "v1:-9223372036854775808:1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseStopMark(s)
		if err != nil {
			return
		}
		if m.Grace < 0 {
			t.Fatalf("parse(%q): negative grace %v", s, m.Grace)
		}
		out := m.String()
		back, err := parseStopMark(out)
		if err != nil {
			t.Fatalf("parse(%q) = %+v prints %q, which does not parse: %v", s, m, out, err)
		}
		if !back.Requested.Equal(m.Requested) || back.Grace != m.Grace || back.Recorded != m.Recorded {
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
