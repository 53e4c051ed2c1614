package annotations

import (
	"errors"
	"strings"
	"testing"
)

func TestParseBandwidth(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        BandwidthRequest
		// wantErrs are the annotations the error must name, in order.
		wantErrs []string
		// wantForm must appear in the error: the accepted form.
		wantForm string
	}{
		{name: "none", annotations: map[string]string{"other": "x"}, want: BandwidthRequest{Network: PodNetwork}},
		{
			name: "required and expected in, required out, a strategy",
			annotations: map[string]string{
				IngressRequired: "400M", IngressExpected: "500M",
				EgressRequired: "1G", BandwidthStrategy: "most-headroom",
			},
			want: BandwidthRequest{
				Ingress:  Direction{Required: 400e6, HasRequired: true, Expected: 500e6, HasExpected: true},
				Egress:   Direction{Required: 1e9, HasRequired: true},
				Strategy: MostHeadroom,
				Network:  PodNetwork,
			},
		},
		{
			name:        "a network named",
			annotations: map[string]string{IngressRequired: "2G", BandwidthNetwork: "storage"},
			want:        BandwidthRequest{Ingress: Direction{Required: 2e9, HasRequired: true}, Network: "storage", NetworkNamed: true},
		},
		{
			name:        "the pod network named",
			annotations: map[string]string{BandwidthNetwork: "pod"},
			want:        BandwidthRequest{Network: PodNetwork, NetworkNamed: true},
		},
		{name: "network not a DNS label", annotations: map[string]string{BandwidthNetwork: "Storage_1"}, wantErrs: []string{BandwidthNetwork}, wantForm: NetworkForm},
		{name: "network empty", annotations: map[string]string{BandwidthNetwork: ""}, wantErrs: []string{BandwidthNetwork}, wantForm: NetworkForm},
		{
			name:        "expected equal to required, binary suffix, spaces",
			annotations: map[string]string{EgressRequired: " 1Gi", EgressExpected: "1Gi "},
			want:        BandwidthRequest{Egress: Direction{Required: 1 << 30, HasRequired: true, Expected: 1 << 30, HasExpected: true}, Network: PodNetwork},
		},
		{
			name:        "zero is allowed",
			annotations: map[string]string{IngressRequired: "0"},
			want:        BandwidthRequest{Ingress: Direction{HasRequired: true}, Network: PodNetwork},
		},
		{name: "ingress-required not a quantity", annotations: map[string]string{IngressRequired: "lots"}, wantErrs: []string{IngressRequired}, wantForm: RateForm},
		{name: "egress-required negative", annotations: map[string]string{EgressRequired: "-1M"}, wantErrs: []string{EgressRequired}, wantForm: RateForm},
		{name: "ingress-expected unit typo", annotations: map[string]string{IngressExpected: "500Mbps"}, wantErrs: []string{IngressExpected}, wantForm: RateForm},
		{name: "egress-expected empty", annotations: map[string]string{EgressExpected: ""}, wantErrs: []string{EgressExpected}, wantForm: RateForm},
		{name: "too large", annotations: map[string]string{IngressRequired: "2E"}, wantErrs: []string{IngressRequired}, wantForm: RateForm},
		{name: "too long", annotations: map[string]string{IngressRequired: strings.Repeat("1", 40)}, wantErrs: []string{IngressRequired}, wantForm: RateForm},
		{name: "strategy unknown", annotations: map[string]string{BandwidthStrategy: "fastest"}, wantErrs: []string{BandwidthStrategy}, wantForm: "best-fit or most-headroom"},
		{
			name:        "ingress expected below required",
			annotations: map[string]string{IngressRequired: "400M", IngressExpected: "300M"},
			wantErrs:    []string{IngressExpected}, wantForm: "at least " + IngressRequired,
		},
		{
			name:        "egress expected below required",
			annotations: map[string]string{EgressRequired: "1G", EgressExpected: "999M"},
			wantErrs:    []string{EgressExpected}, wantForm: "at least " + EgressRequired,
		},
		{
			name:        "unknown annotation under the prefix (typo)",
			annotations: map[string]string{BandwidthPrefix + "ingress-requried": "400M"},
			wantErrs:    []string{BandwidthPrefix + "ingress-requried"}, wantForm: IngressRequired,
		},
		{
			name:        "sextant's limits",
			annotations: map[string]string{IngressLimit: "1G", EgressLimit: "100M", EgressRequired: "50M"},
			want: BandwidthRequest{
				Ingress: Direction{Limit: 1e9, HasLimit: true},
				Egress:  Direction{Required: 50e6, HasRequired: true, Limit: 100e6, HasLimit: true},
				Network: PodNetwork,
			},
		},
		{
			name:        "the CNI bandwidth plugin's limits",
			annotations: map[string]string{KubernetesIngressBandwidth: "10M", KubernetesEgressBandwidth: "20M"},
			want: BandwidthRequest{
				Ingress: Direction{Limit: 10e6, HasLimit: true},
				Egress:  Direction{Limit: 20e6, HasLimit: true},
				Network: PodNetwork,
			},
		},
		{
			name:        "both limits: the lower wins",
			annotations: map[string]string{IngressLimit: "300M", KubernetesIngressBandwidth: "200M", EgressLimit: "100M", KubernetesEgressBandwidth: "1G"},
			want: BandwidthRequest{
				Ingress: Direction{Limit: 200e6, HasLimit: true},
				Egress:  Direction{Limit: 100e6, HasLimit: true},
				Network: PodNetwork,
			},
		},
		{
			name:        "expected equal to the limit",
			annotations: map[string]string{IngressExpected: "100M", IngressLimit: "100M"},
			want:        BandwidthRequest{Ingress: Direction{Expected: 100e6, HasExpected: true, Limit: 100e6, HasLimit: true}, Network: PodNetwork},
		},
		{
			name:        "expected above the limit",
			annotations: map[string]string{EgressExpected: "200M", EgressLimit: "100M"},
			wantErrs:    []string{EgressExpected}, wantForm: "at most " + EgressLimit,
		},
		{
			name:        "expected above the lower of two limits",
			annotations: map[string]string{IngressExpected: "200M", IngressLimit: "1G", KubernetesIngressBandwidth: "100M"},
			wantErrs:    []string{IngressExpected}, wantForm: "at most " + KubernetesIngressBandwidth,
		},
		{
			name:        "required and expected above the limit",
			annotations: map[string]string{IngressRequired: "300M", IngressExpected: "400M", KubernetesIngressBandwidth: "100M"},
			wantErrs:    []string{IngressExpected, IngressRequired}, wantForm: "at most " + KubernetesIngressBandwidth,
		},
		{name: "limit zero", annotations: map[string]string{EgressLimit: "0"}, wantErrs: []string{EgressLimit}, wantForm: LimitForm},
		{name: "limit not a quantity", annotations: map[string]string{KubernetesEgressBandwidth: "fast"}, wantErrs: []string{KubernetesEgressBandwidth}, wantForm: LimitForm},
		{
			name:        "every problem reported",
			annotations: map[string]string{IngressRequired: "x", EgressExpected: "y", BandwidthStrategy: "z"},
			wantErrs:    []string{IngressRequired, EgressExpected, BandwidthStrategy},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseBandwidth(tc.annotations)
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
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error %T is not Errors", err)
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
			var one *Error
			if !errors.As(err, &one) {
				t.Error("errors.As should find an *Error")
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

func FuzzParseBandwidth(f *testing.F) {
	for _, v := range []string{"400M", " 1Gi", "0", "-1M", "2E", "1e.5", "500Mbps", "", "1P", "0.5"} {
		f.Add(v, "best-fit")
	}
	f.Fuzz(func(t *testing.T, rate, strategy string) {
		req, err := ParseBandwidth(map[string]string{IngressRequired: rate, EgressExpected: rate, BandwidthStrategy: strategy})
		if err != nil {
			if !strings.Contains(err.Error(), "want ") {
				t.Fatalf("error %q does not say what is accepted", err)
			}
			return
		}
		for _, v := range []int64{req.Ingress.Required, req.Egress.Expected} {
			if v < 0 || v > MaxRate {
				t.Fatalf("ParseBandwidth(%q) = %d bits/s, outside [0, %d]", rate, v, MaxRate)
			}
		}
		if !req.Ingress.HasRequired || !req.Egress.HasExpected {
			t.Fatalf("ParseBandwidth(%q) accepted the rate but did not set it: %+v", rate, req)
		}
		// What FormatRate prints parses back to the same rate.
		again, err := ParseBandwidth(map[string]string{IngressRequired: FormatRate(req.Ingress.Required)})
		if err != nil || again.Ingress.Required != req.Ingress.Required {
			t.Fatalf("round trip of %d: %+v, %v", req.Ingress.Required, again, err)
		}
	})
}

func TestIsNetworkName(t *testing.T) {
	for s, want := range map[string]bool{
		"pod": true, "storage": true, "sriov-1": true, "a": true, "0": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "a-": false, "Pod": false, "a_b": false, "a.b": false, strings.Repeat("a", 64): false, "é": false,
	} {
		if got := IsNetworkName(s); got != want {
			t.Errorf("IsNetworkName(%q) = %v, want %v", s, got, want)
		}
	}
}
