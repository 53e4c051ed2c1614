package heartbeat

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sextant.io/sextant/api/v1alpha1"
)

// A report's Received is its arrival on the ranker's clock, whatever the agent's
// sampleTime says; a version delivered again keeps its first arrival; what the ranker
// lists at startup is dated by the API server's status write when that is earlier.
func TestReceived(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	agentClock := metav1.NewTime(t0.Add(time.Hour)) // an agent whose clock runs ahead
	version := func(rv string) *v1alpha1.NodeBandwidth {
		b := bw("n")
		b.ResourceVersion = rv
		b.Status.SampleTime = &agentClock
		return b
	}
	s := NewFromObjects()
	s.PutAt(version("1"), t0)
	if got := s.Node("n").Bandwidth().Received; !got.Equal(t0) {
		t.Errorf("received %v, want the arrival %v", got, t0)
	}
	s.PutAt(version("1"), t0.Add(time.Minute))
	if got := s.Node("n").Bandwidth().Received; !got.Equal(t0) {
		t.Errorf("a relisted version received %v, want its first arrival %v", got, t0)
	}
	s.PutAt(version("2"), t0.Add(2*time.Minute))
	if got := s.Node("n").Bandwidth().Received; !got.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("a new version received %v, want %v", got, t0.Add(2*time.Minute))
	}

	// Through the transform, as the informer delivers a listed object.
	written := metav1.NewTime(t0.Add(-10 * time.Minute))
	listed := version("3")
	listed.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeBandwidth"}
	listed.Name = "m"
	listed.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "sextant-agent", Subresource: "status", Time: &written, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{}}`)}},
		{Manager: "kubectl", Time: &metav1.Time{Time: t0}}, // a label, not a report
	}
	out, err := storeBandwidth(asUnstructured(t, listed))
	if err != nil {
		t.Fatal(err)
	}
	kept := out.(*v1alpha1.NodeBandwidth)
	if len(kept.ManagedFields) != 1 || kept.ManagedFields[0].FieldsV1 != nil {
		t.Errorf("managed fields kept: %+v, want the status write's time only", kept.ManagedFields)
	}
	s.put(kept, t0, true)
	if got := s.Node("m").Bandwidth().Received; !got.Equal(written.Time) {
		t.Errorf("listed at startup: received %v, want the status write %v", got, written.Time)
	}
	s.put(kept.DeepCopy(), t0, false)
	s.Delete(kept)
	s.put(kept, t0, false)
	if got := s.Node("m").Bandwidth().Received; !got.Equal(t0) {
		t.Errorf("watched: received %v, want the arrival %v", got, t0)
	}
	future := kept.DeepCopy()
	future.Name = "f"
	future.ManagedFields[0].Time = &metav1.Time{Time: t0.Add(time.Hour)}
	s.put(future, t0, true)
	if got := s.Node("f").Bandwidth().Received; !got.Equal(t0) {
		t.Errorf("listed, written after the listing: received %v, want the listing %v", got, t0)
	}
}

// A new version the watch delivers late (the relist after a watch break) is dated as if
// it had come as promptly as the node's previous one, so that a report an agent wrote
// during the break and then died does not count as fresh; a delay both versions share
// (a skewed clock) leaves the arrival as it is.
func TestReceivedLateDelivery(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	const staleAfter = time.Minute
	written := func(rv string, at time.Time) *v1alpha1.NodeBandwidth {
		b := bw("n")
		b.ResourceVersion = rv
		if !at.IsZero() {
			b.ManagedFields = []metav1.ManagedFieldsEntry{{Subresource: "status", Time: &metav1.Time{Time: at}}}
		}
		return b
	}
	for _, c := range []struct {
		name                 string
		prevWritten, prevArr time.Time // zero prevArr: no previous report
		newWritten           time.Time
		want                 time.Time // Received of the new version, which arrives at t0
	}{
		{"written during a watch break, 3 min ago", t0.Add(-4 * time.Minute), t0.Add(-4 * time.Minute), t0.Add(-3 * time.Minute), t0.Add(-3 * time.Minute)},
		{"prompt", t0.Add(-10 * time.Second), t0.Add(-10 * time.Second), t0.Add(-time.Second), t0},
		{"within the allowance", t0.Add(-20 * time.Second), t0.Add(-20 * time.Second), t0.Add(-lateAllowance), t0},
		{"API server's clock 3 min behind", t0.Add(-3*time.Minute - 10*time.Second), t0.Add(-10 * time.Second), t0.Add(-3 * time.Minute), t0},
		{"API server's clock 1 min ahead", t0.Add(50 * time.Second), t0.Add(-10 * time.Second), t0.Add(time.Minute), t0},
		{"clock 3 min behind and a watch break", t0.Add(-8 * time.Minute), t0.Add(-5 * time.Minute), t0.Add(-5 * time.Minute), t0.Add(-2 * time.Minute)},
		{"no previous report: may be skew", time.Time{}, time.Time{}, t0.Add(-3 * time.Minute), t0},
		{"previous without a write time", time.Time{}, t0.Add(-4 * time.Minute), t0.Add(-3 * time.Minute), t0},
		{"no write time", t0.Add(-4 * time.Minute), t0.Add(-4 * time.Minute), time.Time{}, t0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewFromObjects()
			if !c.prevArr.IsZero() {
				s.put(written("1", c.prevWritten), c.prevArr, false)
			}
			s.put(written("2", c.newWritten), t0, false)
			got := s.Node("n").Bandwidth().Received
			if !got.Equal(c.want) {
				t.Errorf("received %v, want %v", got, c.want)
			}
			// However it is dated, Arrived is when it came in.
			if arr := s.Node("n").Bandwidth().Arrived; !arr.Equal(t0) {
				t.Errorf("arrived %v, want %v", arr, t0)
			}
			if stale, wantStale := t0.Sub(got) > staleAfter, t0.Sub(c.want) > staleAfter; stale != wantStale {
				t.Errorf("stale after %v: %v, want %v", staleAfter, stale, wantStale)
			}
			// Delivered again (another relist): still its first dating.
			s.put(written("2", c.newWritten), t0.Add(time.Hour), false)
			if again := s.Node("n").Bandwidth().Received; !again.Equal(got) {
				t.Errorf("delivered again: received %v, want %v", again, got)
			}
			if arr := s.Node("n").Bandwidth().Arrived; !arr.Equal(t0) {
				t.Errorf("delivered again: arrived %v, want its first arrival %v", arr, t0)
			}
		})
	}
}
