package bandwidth

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"sextant.io/sextant/api/annotations"
)

func TestArgsValidate(t *testing.T) {
	tests := []struct {
		name    string
		mut     func(*Args)
		wantErr []string
	}{
		{name: "defaults", mut: func(a *Args) { *a = Defaults }},
		{name: "most-headroom, one weight zero", mut: func(a *Args) { a.Strategy = annotations.MostHeadroom; a.EgressWeight = 0 }},
		{name: "unknown strategy", mut: func(a *Args) { a.Strategy = "fastest" }, wantErr: []string{`strategy (--bandwidth-strategy) "fastest" unknown; want best-fit or most-headroom`}},
		{name: "empty strategy", mut: func(a *Args) { a.Strategy = "" }, wantErr: []string{"strategy"}},
		{name: "negative ingress weight", mut: func(a *Args) { a.IngressWeight = -1 }, wantErr: []string{"ingressWeight (--bandwidth-ingress-weight) -1 is negative"}},
		{name: "negative egress weight", mut: func(a *Args) { a.EgressWeight = -2 }, wantErr: []string{"egressWeight (--bandwidth-egress-weight) -2 is negative"}},
		{name: "both weights zero", mut: func(a *Args) { a.IngressWeight, a.EgressWeight = 0, 0 }, wantErr: []string{"both 0"}},
		{name: "zero staleAfter", mut: func(a *Args) { a.StaleAfter.Duration = 0 }, wantErr: []string{"staleAfter (--bandwidth-stale-after) 0s must be positive"}},
		{name: "negative staleAfter", mut: func(a *Args) { a.StaleAfter.Duration = -time.Second }, wantErr: []string{"must be positive"}},
		{name: "zero minWindow takes every report", mut: func(a *Args) { a.MinWindow.Duration = 0 }},
		{name: "strict best-fit window", mut: func(a *Args) { a.BestFitWindow = WindowStrict }},
		{name: "unknown best-fit window", mut: func(a *Args) { a.BestFitWindow = "loose" }, wantErr: []string{`bestFitWindow (--bandwidth-best-fit-window) "loose" unknown; want prefer or strict`}},
		{name: "negative minWindow", mut: func(a *Args) { a.MinWindow.Duration = -time.Second }, wantErr: []string{"minWindow (--bandwidth-min-window) -1s is negative"}},
		{
			name: "all at once",
			mut: func(a *Args) {
				*a = Args{Strategy: "x", IngressWeight: -1, EgressWeight: -1, MinWindow: metav1.Duration{Duration: -1}}
			},
			wantErr: []string{"strategy", "ingressWeight", "egressWeight", "staleAfter", "minWindow"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := testArgs(tc.mut)
			err := a.Validate()
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want error containing %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// withDefaults restores Defaults after a test that changes them through the flags.
func withDefaults(t *testing.T) {
	saved := Defaults
	t.Cleanup(func() { Defaults = saved })
}

func TestDecodeArgsPrecedence(t *testing.T) {
	withDefaults(t)
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--bandwidth-strategy=most-headroom", "--bandwidth-ingress-weight=3", "--bandwidth-stale-after=2m", "--bandwidth-min-window=30s"}); err != nil {
		t.Fatal(err)
	}

	// No plugin args: the flags rule.
	got, err := decodeArgs(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Args{Strategy: annotations.MostHeadroom, IngressWeight: 3, EgressWeight: 1, StaleAfter: metav1.Duration{Duration: 2 * time.Minute},
		MinWindow: metav1.Duration{Duration: 30 * time.Second}, BestFitWindow: WindowPrefer,
		NotStartedReduceAfter: metav1.Duration{Duration: 2 * time.Minute}, NotStartedReleaseAfter: metav1.Duration{Duration: 5 * time.Minute}}
	if got != want {
		t.Errorf("flags only: got %+v, want %+v", got, want)
	}

	// Explicit plugin args win over the flags, field by field; a zero weight counts.
	for _, tc := range []struct {
		name string
		obj  runtime.Object
	}{
		{"json", &runtime.Unknown{Raw: []byte(`{"strategy":"best-fit","ingressWeight":0,"staleAfter":"30s","minWindow":"0s"}`), ContentType: runtime.ContentTypeJSON}},
		{"yaml", &runtime.Unknown{Raw: []byte("strategy: best-fit\ningressWeight: 0\nstaleAfter: 30s\nminWindow: 0s\n"), ContentType: runtime.ContentTypeYAML}},
	} {
		got, err := decodeArgs(tc.obj)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := Args{Strategy: annotations.BestFit, IngressWeight: 0, EgressWeight: 1, StaleAfter: metav1.Duration{Duration: 30 * time.Second}, BestFitWindow: WindowPrefer,
			NotStartedReduceAfter: metav1.Duration{Duration: 2 * time.Minute}, NotStartedReleaseAfter: metav1.Duration{Duration: 5 * time.Minute}}
		if got != want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, want)
		}
	}

	// Invalid args fail with the plugin's name and the field.
	_, err = decodeArgs(&runtime.Unknown{Raw: []byte(`{"egressWeight":-1}`)})
	if err == nil || !strings.Contains(err.Error(), "BandwidthAware args") || !strings.Contains(err.Error(), "egressWeight") {
		t.Errorf("want a BandwidthAware egressWeight error, got %v", err)
	}
	_, err = decodeArgs(&runtime.Unknown{Raw: []byte(`{"staleAfter":"soon"}`)})
	if err == nil || !strings.Contains(err.Error(), "decode BandwidthAware args") {
		t.Errorf("want a decode error, got %v", err)
	}
}

func TestStrategyFlagRejectsUnknown(t *testing.T) {
	withDefaults(t)
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	RegisterFlags(fs)
	err := fs.Parse([]string{"--bandwidth-strategy=fastest"})
	if err == nil || !strings.Contains(err.Error(), "bandwidth-strategy") || !strings.Contains(err.Error(), "best-fit or most-headroom") {
		t.Errorf("want an error naming the flag and the accepted values, got %v", err)
	}
}

// TestDecodeArgsStrict: a field the plugin does not know, one given twice, or a value of
// the wrong type stops the ranker with an error naming the field, instead of the plugin
// running on its defaults.
func TestDecodeArgsStrict(t *testing.T) {
	for _, tc := range []struct {
		name, raw, contentType string
		want                   []string
	}{
		{"misspelt field", `{"ingressWieght":2}`, runtime.ContentTypeJSON, []string{"BandwidthAware", `unknown field "ingressWieght"`}},
		{"misspelt field in YAML", "strategy: best-fit\negressweight: 2\n", runtime.ContentTypeYAML, []string{"BandwidthAware", `unknown field "egressweight"`}},
		{"field given twice", `{"ingressWeight":2,"ingressWeight":3}`, runtime.ContentTypeJSON, []string{"BandwidthAware", `duplicate field "ingressWeight"`}},
		{"fractional weight", `{"ingressWeight":1.5}`, runtime.ContentTypeJSON, []string{"BandwidthAware", "ingressWeight"}},
		{"weight as a string", `{"egressWeight":"2"}`, runtime.ContentTypeJSON, []string{"BandwidthAware", "egressWeight"}},
		{"unknown best-fit window", `{"bestFitWindow":"loose"}`, runtime.ContentTypeJSON, []string{"bestFitWindow", "prefer or strict"}},
		{"not YAML", "strategy: [", runtime.ContentTypeYAML, []string{"BandwidthAware", "YAML"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeArgs(&runtime.Unknown{Raw: []byte(tc.raw), ContentType: tc.contentType})
			if err == nil {
				t.Fatalf("%s: decoded without error", tc.raw)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
	got, err := decodeArgs(&runtime.Unknown{Raw: []byte(`{"bestFitWindow":"strict"}`)})
	if err != nil || got.BestFitWindow != WindowStrict {
		t.Errorf("bestFitWindow strict: %+v, %v", got, err)
	}
}

func TestBestFitWindowFlag(t *testing.T) {
	withDefaults(t)
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	RegisterFlags(fs)
	if err := fs.Parse([]string{"--bandwidth-best-fit-window=strict"}); err != nil || Defaults.BestFitWindow != WindowStrict {
		t.Fatalf("--bandwidth-best-fit-window=strict: %v, Defaults %q", err, Defaults.BestFitWindow)
	}
	for _, bad := range []string{"loose", ""} {
		err := fs.Parse([]string{"--bandwidth-best-fit-window=" + bad})
		if err == nil || !strings.Contains(err.Error(), "bandwidth-best-fit-window") || !strings.Contains(err.Error(), "prefer or strict") {
			t.Errorf("%q: want an error naming the flag and the accepted values, got %v", bad, err)
		}
	}
}
