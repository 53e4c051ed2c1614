package main

import (
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/kubernetes/third_party/forked/golang/expansion"

	"sextant.io/sextant/api/sidecarcommand"
)

// FuzzExpand: the wrapper expands $(VAR) in the command the webhook moved out of the
// pod spec, so it must expand exactly as the kubelet would have: compared with the
// kubelet's own expansion package. Strings reach the wrapper through JSON, so they
// are valid UTF-8.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{
		"plain", "$(A)", "--port=$(PORT)", "$(MISSING)", "$$(A)", "$$", "a$b", "$(A", "$()", "$(EMPTY)x",
		"$(A)$(PORT)$", "echo $HOME $(A)/$$", "$(a$$", "$($(A))", "$(A)))", "$", "$(", "$)", "$$$(A)", "é$é$(é)",
	} {
		f.Add(s, "A", "1")
	}
	f.Fuzz(func(t *testing.T, s, name, value string) {
		if !utf8.ValidString(s) {
			return
		}
		env := map[string]string{name: value, "PORT": "15001", "EMPTY": ""}
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		want := expansion.Expand(s, expansion.MappingFuncFor(env))
		if name == "" {
			// The kubelet never has a variable without a name; $() stays as written.
			want = expansion.Expand(s, expansion.MappingFuncFor(map[string]string{"PORT": "15001", "EMPTY": ""}))
		}
		if got := expand(s, lookup); got != want {
			t.Fatalf("expand(%q) with %s=%q: %q, the kubelet: %q", s, name, value, got, want)
		}
	})
}

// FuzzParseCommand: whatever $SEXTANT_SIDECAR_COMMAND holds, parsing never panics; a
// JSON array of strings parses to as many words, each expanded on its own.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{
		`["/bin/envoy","--base-id","$(A)"]`, `[]`, `[""]`, `["sleep","3600"]`, "", "envoy", `{"a":1}`, `[1]`,
		`["a",null]`, `["$(A)$$"]`, `["\u0000"]`, `[` + strings.Repeat(`"x",`, 100) + `"x"]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		lookup := func(k string) (string, bool) { return "v", k == "A" }
		got, err := parseCommand(raw, lookup)
		words, perr := sidecarcommand.Parse(raw)
		if perr != nil {
			if err == nil {
				t.Fatalf("parseCommand(%q) = %q, want an error: %v", raw, got, perr)
			}
			return
		}
		if err != nil {
			t.Fatalf("parseCommand(%q): %v", raw, err)
		}
		if len(got) != len(words) {
			t.Fatalf("parseCommand(%q) = %d words, want %d", raw, len(got), len(words))
		}
		for i, w := range words {
			if want := expand(w, lookup); got[i] != want {
				t.Fatalf("parseCommand(%q)[%d] = %q, want %q", raw, i, got[i], want)
			}
		}
	})
}
