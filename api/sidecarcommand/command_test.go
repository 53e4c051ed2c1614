package sidecarcommand

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		raw  string
		want []string
		err  string
	}{
		{raw: `["/bin/envoy","-c","/etc/envoy.yaml"]`, want: []string{"/bin/envoy", "-c", "/etc/envoy.yaml"}},
		{raw: `["sh","-c",""]`, want: []string{"sh", "-c", ""}},
		{raw: `["$(A)"]`, want: []string{"$(A)"}},
		{raw: ``, err: "not a JSON array of strings"},
		{raw: `envoy`, err: "not a JSON array of strings"},
		{raw: `{"a":1}`, err: "not a JSON array of strings"},
		{raw: `[1]`, err: "not a JSON array of strings"},
		{raw: `null`, err: "not a JSON array of strings"},
		{raw: `[]`, err: "empty command"},
		{raw: `[""]`, err: "empty command"},
		{raw: `["",  "x"]`, err: "empty command"},
		{raw: `["printf",null,"b"]`, err: "word 1 is null, not a string"},
		{raw: `[null]`, err: "word 0 is null, not a string"},
	} {
		got, err := Parse(tt.raw)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("Parse(%q) = %q, %v; want the error %q", tt.raw, got, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("Parse(%q) = %q, %v; want %q", tt.raw, got, err, tt.want)
		}
	}
}

// FuzzParse: whatever the annotation holds, Parse never panics, and what it accepts
// written back as JSON parses to the same words.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`["/bin/envoy","-c","/etc/envoy.yaml"]`, `[]`, `[""]`, `null`, `["a",null]`, `[1]`, `"x"`, `{"a":1}`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := Parse(raw)
		if err != nil {
			return
		}
		if len(got) == 0 || got[0] == "" {
			t.Fatalf("Parse(%q) = %q: accepted an empty command", raw, got)
		}
		b, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(string(b))
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("Parse(%q) = %q, written back %s parses to %q, %v", raw, got, b, again, err)
		}
	})
}
