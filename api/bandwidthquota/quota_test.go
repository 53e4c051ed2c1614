package bandwidthquota

import (
	"errors"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

func TestClaim(t *testing.T) {
	for _, c := range []struct {
		name        string
		ann         map[string]string
		wantNetwork string
		want        Rates
		wantOK      bool
	}{
		{"both directions", map[string]string{annotations.IngressRequired: "100M", annotations.EgressRequired: "1G"}, "pod", Rates{100e6, 1e9}, true},
		{"a named network", map[string]string{annotations.EgressRequired: "5G", annotations.BandwidthNetwork: "storage"}, "storage", Rates{0, 5e9}, true},
		{"expected only", map[string]string{annotations.IngressExpected: "1G"}, "", Rates{}, false},
		{"malformed", map[string]string{annotations.IngressRequired: "fast"}, "", Rates{}, false},
		{"none", nil, "", Rates{}, false},
	} {
		network, r, ok := Claim(c.ann)
		if network != c.wantNetwork || r != c.want || ok != c.wantOK {
			t.Errorf("%s: %q %+v %v, want %q %+v %v", c.name, network, r, ok, c.wantNetwork, c.want, c.wantOK)
		}
	}
}

func TestCheck(t *testing.T) {
	q := func(name string, hard ...v1alpha1.NetworkQuota) *v1alpha1.BandwidthQuota {
		return &v1alpha1.BandwidthQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: v1alpha1.BandwidthQuotaSpec{Hard: hard}}
	}
	quotas := []*v1alpha1.BandwidthQuota{
		q("z-wide", v1alpha1.NetworkQuota{Network: "pod", Ingress: "10G", Egress: "10G"}),
		q("a-tight", v1alpha1.NetworkQuota{Network: "pod", Egress: "300M"}),
	}
	used := Usage{"pod": {Ingress: 1e9, Egress: 200e6}}
	for _, c := range []struct {
		name      string
		network   string
		r         Rates
		wantQuota string
	}{
		{"within both", "pod", Rates{Ingress: 1e9, Egress: 100e6}, ""},
		{"past the tight one", "pod", Rates{Egress: 100e6 + 1}, "a-tight"},
		{"past both: the first by name", "pod", Rates{Egress: 20e9}, "a-tight"},
		{"an uncapped network", "storage", Rates{Egress: 1e15}, ""},
	} {
		err := Check(quotas, used, c.network, c.r)
		var ex *ExceededError
		switch {
		case c.wantQuota == "" && err != nil:
			t.Errorf("%s: %v, want none", c.name, err)
		case c.wantQuota != "" && (!errors.As(err, &ex) || ex.Quota != c.wantQuota):
			t.Errorf("%s: %v, want one naming %s", c.name, err, c.wantQuota)
		}
	}
	if got := Status(quotas[0], used); !reflect.DeepEqual(got, []v1alpha1.NetworkQuota{{Network: "pod", Ingress: "1G", Egress: "200M"}}) {
		t.Errorf("status.used %+v", got)
	}
	// A cap that does not parse caps at 0: a typo must not lift it.
	broken := q("broken", v1alpha1.NetworkQuota{Network: "pod", Ingress: "2000P"})
	if err := Check([]*v1alpha1.BandwidthQuota{broken}, Usage{}, "pod", Rates{Ingress: 1}); err == nil {
		t.Error("an unparseable cap let a pod through")
	}
}
