package numa

import (
	"context"
	"testing"

	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
)

func TestSignPod(t *testing.T) {
	pl := NewWith(nil, nil)
	a, st := pl.SignPod(context.Background(), pod("a", "1", gi, nil))
	b, _ := pl.SignPod(context.Background(), pod("b", "1", gi, nil))
	if !st.IsSuccess() || len(a) != 1 || a[0].Value != b[0].Value {
		t.Errorf("equal pods signed %v and %v (%v)", a, b, st)
	}
	if _, st := pl.SignPod(context.Background(), pod("c", "1", gi, map[string]string{annotations.NUMAPolicy: "x"})); st.Code() != fwk.Unschedulable {
		t.Errorf("malformed policy signed: %v", st)
	}
}
