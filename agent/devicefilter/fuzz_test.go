package devicefilter

import "testing"

// FuzzParseRule: no input panics, and every rule that parses is written back as the
// same rule.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"include:address=0000:3b:00.0", "exclude:kind=nvme", "exclude:driver=mlx5_core", "exclude:kind=", ":=", "include:address=10000:00:01.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		again, err := ParseRule(r.String())
		if err != nil || again != r {
			t.Fatalf("%q parsed as %+v, written %q, parsed again as %+v, %v", s, r, r.String(), again, err)
		}
	})
}
