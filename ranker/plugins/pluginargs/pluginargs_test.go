package pluginargs

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

type args struct {
	Weight int64           `json:"weight"`
	Mode   string          `json:"mode,omitempty"`
	After  metav1.Duration `json:"after,omitempty"`
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		obj     runtime.Object
		want    args
		wantErr []string
	}{
		{name: "nil keeps the defaults", obj: nil, want: args{Weight: 1}},
		{name: "empty keeps the defaults", obj: &runtime.Unknown{}, want: args{Weight: 1}},
		{name: "JSON", obj: &runtime.Unknown{Raw: []byte(`{"weight":3,"mode":"x"}`)}, want: args{Weight: 3, Mode: "x"}},
		{name: "YAML", obj: &runtime.Unknown{Raw: []byte("weight: 4\n"), ContentType: runtime.ContentTypeYAML}, want: args{Weight: 4}},
		{name: "unknown field", obj: &runtime.Unknown{Raw: []byte(`{"wieght":3}`)}, wantErr: []string{"decode P args", `unknown field "wieght"`}},
		{name: "field names are case-sensitive", obj: &runtime.Unknown{Raw: []byte(`{"Weight":3}`)}, wantErr: []string{`unknown field "Weight"`}},
		{name: "duplicate field", obj: &runtime.Unknown{Raw: []byte(`{"weight":3,"weight":4}`)}, wantErr: []string{`duplicate field "weight"`}},
		{name: "wrong type", obj: &runtime.Unknown{Raw: []byte(`{"weight":1.5}`)}, wantErr: []string{"weight"}},
		{name: "malformed duration", obj: &runtime.Unknown{Raw: []byte(`{"weight":2,"after":"abc"}`)},
			wantErr: []string{`decode P args: after: "abc": time: invalid duration "abc"; want a duration such as 60s or 2m30s`}},
		{name: "malformed duration in YAML", obj: &runtime.Unknown{Raw: []byte("after: 5 minutes\n"), ContentType: runtime.ContentTypeYAML},
			wantErr: []string{`after: "5 minutes": time: unknown unit`, "want a duration such as 60s"}},
		{name: "content type", obj: &runtime.Unknown{Raw: []byte(`x`), ContentType: "application/vnd.kubernetes.protobuf"}, wantErr: []string{"want JSON or YAML"}},
		{name: "typed args of another kind", obj: &metav1.Status{}, wantErr: []string{"runtime.Unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := args{Weight: 1}
			err := Decode("P", tc.obj, &got)
			if len(tc.wantErr) == 0 {
				if err != nil || got != tc.want {
					t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("decoded %+v without error", got)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestNone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		obj     runtime.Object
		wantErr string
	}{
		{name: "nil", obj: nil},
		{name: "empty object", obj: &runtime.Unknown{Raw: []byte(`{}`)}},
		{name: "type meta only", obj: &runtime.Unknown{Raw: []byte(`{"kind":"X","apiVersion":"v1"}`)}},
		{name: "a field", obj: &runtime.Unknown{Raw: []byte(`{"weight":1}`)}, wantErr: `P args: unknown field "weight": the plugin takes no args`},
		{name: "not an object", obj: &runtime.Unknown{Raw: []byte(`[1]`)}, wantErr: "decode P args"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := None("P", tc.obj)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
