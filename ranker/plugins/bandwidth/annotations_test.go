package bandwidth

import (
	"errors"
	"strings"
	"testing"
)

func TestParseAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        Request
		// wantErrs are the annotations the error must name, in order.
		wantErrs []string
		// wantForm must appear in the error: the accepted form.
		wantForm string
	}{
		{name: "none", annotations: map[string]string{"other": "x"}, want: Request{}},
		{
			name: "seed example",
			annotations: map[string]string{
				AnnotationIngressRequired: "400M", AnnotationIngressExpected: "500M",
				AnnotationEgressRequired: "1G", AnnotationStrategy: "most-headroom",
			},
			want: Request{
				Ingress:  Direction{Required: 400e6, HasRequired: true, Expected: 500e6, HasExpected: true},
				Egress:   Direction{Required: 1e9, HasRequired: true},
				Strategy: MostHeadroom,
			},
		},
		{
			name:        "expected equal to required, binary suffix, spaces",
			annotations: map[string]string{AnnotationEgressRequired: " 1Gi", AnnotationEgressExpected: "1Gi "},
			want:        Request{Egress: Direction{Required: 1 << 30, HasRequired: true, Expected: 1 << 30, HasExpected: true}},
		},
		{
			name:        "zero is allowed",
			annotations: map[string]string{AnnotationIngressRequired: "0"},
			want:        Request{Ingress: Direction{HasRequired: true}},
		},
		{name: "ingress-required not a quantity", annotations: map[string]string{AnnotationIngressRequired: "lots"}, wantErrs: []string{AnnotationIngressRequired}, wantForm: quantityForm},
		{name: "egress-required negative", annotations: map[string]string{AnnotationEgressRequired: "-1M"}, wantErrs: []string{AnnotationEgressRequired}, wantForm: quantityForm},
		{name: "ingress-expected unit typo", annotations: map[string]string{AnnotationIngressExpected: "500Mbps"}, wantErrs: []string{AnnotationIngressExpected}, wantForm: quantityForm},
		{name: "egress-expected empty", annotations: map[string]string{AnnotationEgressExpected: ""}, wantErrs: []string{AnnotationEgressExpected}, wantForm: quantityForm},
		{name: "too large", annotations: map[string]string{AnnotationIngressRequired: "2E"}, wantErrs: []string{AnnotationIngressRequired}, wantForm: quantityForm},
		{name: "strategy unknown", annotations: map[string]string{AnnotationStrategy: "fastest"}, wantErrs: []string{AnnotationStrategy}, wantForm: "best-fit or most-headroom"},
		{
			name:        "ingress expected below required",
			annotations: map[string]string{AnnotationIngressRequired: "400M", AnnotationIngressExpected: "300M"},
			wantErrs:    []string{AnnotationIngressExpected}, wantForm: "at least " + AnnotationIngressRequired,
		},
		{
			name:        "egress expected below required",
			annotations: map[string]string{AnnotationEgressRequired: "1G", AnnotationEgressExpected: "999M"},
			wantErrs:    []string{AnnotationEgressExpected}, wantForm: "at least " + AnnotationEgressRequired,
		},
		{
			name:        "unknown annotation under the prefix (typo)",
			annotations: map[string]string{AnnotationPrefix + "ingress-requried": "400M"},
			wantErrs:    []string{AnnotationPrefix + "ingress-requried"}, wantForm: AnnotationIngressRequired,
		},
		{
			name:        "every problem reported",
			annotations: map[string]string{AnnotationIngressRequired: "x", AnnotationEgressExpected: "y", AnnotationStrategy: "z"},
			wantErrs:    []string{AnnotationIngressRequired, AnnotationEgressExpected, AnnotationStrategy},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAnnotations(tc.annotations)
			if len(tc.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got != tc.want {
					t.Fatalf("got %+v, want %+v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error naming %v, got %+v", tc.wantErrs, got)
			}
			var es AnnotationErrors
			if !errors.As(err, &es) {
				t.Fatalf("error %T is not AnnotationErrors", err)
			}
			if len(es) != len(tc.wantErrs) {
				t.Fatalf("got %d errors (%v), want %d", len(es), err, len(tc.wantErrs))
			}
			for i, e := range es {
				if e.Annotation != tc.wantErrs[i] {
					t.Errorf("error %d names %s, want %s", i, e.Annotation, tc.wantErrs[i])
				}
			}
			if !strings.Contains(err.Error(), tc.wantErrs[0]) || !strings.Contains(err.Error(), tc.wantForm) {
				t.Errorf("message %q should name %s and the accepted form %q", err, tc.wantErrs[0], tc.wantForm)
			}
			var one *AnnotationError
			if !errors.As(err, &one) {
				t.Error("errors.As should find an *AnnotationError")
			}
		})
	}
}

func TestDirectionTarget(t *testing.T) {
	if v, ok := (Direction{Required: 1, HasRequired: true, Expected: 2, HasExpected: true}).Target(); !ok || v != 2 {
		t.Errorf("expected wins: %d %v", v, ok)
	}
	if v, ok := (Direction{Required: 1, HasRequired: true}).Target(); !ok || v != 1 {
		t.Errorf("required is the fallback: %d %v", v, ok)
	}
	if _, ok := (Direction{}).Target(); ok {
		t.Error("no value, no target")
	}
}
