package nodepods

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestEventName(t *testing.T) {
	for _, c := range []struct {
		name, uid, suffix, want string
	}{
		{"job-x", "1c9d7b9f-6c4f-4d2b-8d7f-3a2e4b5c6d7e", "numa-pinned", "job-x.1c9d7b9f.numa-pinned"},
		{"job-x", "short", "sidecar-not-stopped.proxy", "job-x.short.sidecar-not-stopped.proxy"},
		{strings.Repeat("p", 253), "1c9d7b9f-6c4f", "device-mismatch", strings.Repeat("p", 253-len(".1c9d7b9f.device-mismatch")) + ".1c9d7b9f.device-mismatch"},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name, UID: k8stypes.UID(c.uid)}}
		got := EventName(pod, c.suffix)
		if got != c.want {
			t.Errorf("EventName(%.20s…, %q) = %.40s…, want %.40s…", c.name, c.suffix, got, c.want)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("EventName(%.20s…, %q) = %q is not a valid object name: %v", c.name, c.suffix, got, errs)
		}
	}
}
