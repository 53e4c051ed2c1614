package bandwidth

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/bandwidthclaim"
	"sextant.io/sextant/ranker/heartbeat"
)

// testClock is a clock the test moves.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time          { return c.t }
func (c *testClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// stuckPod is a pod bound to node at bound whose init container never ends.
func stuckPod(node string, bound time.Time, ann map[string]string) *v1.Pod {
	p := testPod(ann)
	p.Spec.NodeName, p.Spec.SchedulerName = node, "sextant"
	p.Status.Phase = v1.PodPending
	p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(bound)}}
	p.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "init", State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(bound)}}}}
	p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "main", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
	return p
}

// A pod that is bound and never starts, asking 1 bit/s required and 1P expected, first
// holds all its node has left; after notStartedReduceAfter only its required rate,
// after notStartedReleaseAfter nothing, with an Event saying why, so a later pod from
// anyone fits again. Once it starts it claims again like any running pod.
func TestNotStartedPodGivesUpItsClaim(t *testing.T) {
	clock := &testClock{t: now}
	pl := testPlugin(t, testArgs(func(a *Args) {
		a.NotStartedReduceAfter = metav1.Duration{Duration: 2 * time.Minute}
		a.NotStartedReleaseAfter = metav1.Duration{Duration: 5 * time.Minute}
	}), report("n", "200M", "200M", now.Add(-time.Second)))
	pl.now = clock.now
	recorder := events.NewFakeRecorder(10)
	pl.events = recorder
	pl.scheduling.Store(true)
	pl.ledger.OnStage(pl.claimsChanged)

	stuck := stuckPod("n", now, map[string]string{annotations.IngressRequired: "1", annotations.IngressExpected: "1P"})
	pl.Ledger().ObservePod(stuck)
	victim := testPod(map[string]string{annotations.IngressRequired: "10M"})
	victimFits := func() bool {
		return pl.Filter(context.Background(), nil, victim, nodeInfo("n")).IsSuccess()
	}
	steps := []struct {
		after      time.Duration
		want       int64
		fits       bool
		wantReason string
	}{
		{0, 200e6, false, ""},
		{2*time.Minute - time.Second, 200e6, false, ""},
		{2 * time.Minute, 1, true, EventReasonReduced},
		{5*time.Minute - time.Second, 1, true, ""},
		{5 * time.Minute, 0, true, EventReasonReleased},
	}
	for _, s := range steps {
		clock.t = now.Add(s.after)
		pl.reports.(*heartbeat.Store).PutAt(report("n", "200M", "200M", clock.t.Add(-time.Second)), clock.t)
		pl.Ledger().Sweep()
		if in, _ := pl.Ledger().Reserved("n"); in != s.want {
			t.Errorf("%s after binding: reserved %s, want %s", s.after, annotations.FormatRate(in), annotations.FormatRate(s.want))
		}
		if got := victimFits(); got != s.fits {
			t.Errorf("%s after binding: a 10M pod fits: %v, want %v", s.after, got, s.fits)
		}
		select {
		case e := <-recorder.Events:
			if s.wantReason == "" || !strings.Contains(e, s.wantReason) || !strings.Contains(e, "network \"pod\"") {
				t.Errorf("%s after binding: Event %q, want one with reason %q naming the network", s.after, e, s.wantReason)
			}
		default:
			if s.wantReason != "" {
				t.Errorf("%s after binding: no Event, want %s", s.after, s.wantReason)
			}
		}
	}
	// An update of the pod that is still stuck changes nothing.
	pl.Ledger().ObservePod(stuck)
	if in, _ := pl.Ledger().Reserved("n"); in != 0 {
		t.Errorf("a status update of the released pod reserved %s again", annotations.FormatRate(in))
	}

	// It starts at last: reserved again, up to what the node has left.
	clock.advance(time.Minute)
	pl.Ledger().ObservePod(runningPod(stuck, "n", clock.t))
	if in, _ := pl.Ledger().Reserved("n"); in != 200e6 {
		t.Errorf("started after its release: reserved %s, want 200M again", annotations.FormatRate(in))
	}
	if len(recorder.Events) != 0 {
		t.Errorf("starting the pod recorded an Event: %q", <-recorder.Events)
	}
}

// A ranker that starts (or takes the lease) after the deadlines passed applies them to
// the pods it rebuilds its ledger from; only the leader records Events.
func TestNotStartedPodSeenLate(t *testing.T) {
	pl := testPlugin(t, testArgs(func(a *Args) {
		a.NotStartedReduceAfter = metav1.Duration{Duration: 2 * time.Minute}
		a.NotStartedReleaseAfter = metav1.Duration{Duration: 5 * time.Minute}
	}), report("n", "200M", "200M", now.Add(-time.Second)))
	recorder := events.NewFakeRecorder(10)
	pl.events = recorder
	pl.ledger.OnStage(pl.claimsChanged)
	for _, c := range []struct {
		bound time.Duration
		want  int64
	}{{-time.Minute, 200e6}, {-3 * time.Minute, 50e6}, {-10 * time.Minute, 0}} {
		pod := stuckPod("n", now.Add(c.bound), map[string]string{annotations.IngressRequired: "50M", annotations.IngressExpected: "1P"})
		before, _ := pl.Ledger().Reserved("n")
		pl.Ledger().ObservePod(pod)
		if in, _ := pl.Ledger().Reserved("n"); in-before != c.want {
			t.Errorf("bound %s ago, not started: reserves %s, want %s", -c.bound, annotations.FormatRate(in-before), annotations.FormatRate(c.want))
		}
		pl.Ledger().ForgetPod(pod.UID)
	}
	if len(recorder.Events) != 0 {
		t.Errorf("a standby (no scheduling cycle yet) recorded an Event: %q", <-recorder.Events)
	}
}

// On a node that enforces, a pod that has not started by notStartedReleaseAfter holds
// no guarantee: the ranker admits a pod in its place, as the agent keeps the guarantees
// of the same pods (bandwidthclaim). Once it starts it comes after the pods bound while
// it held nothing.
func TestNotStartedPodGivesUpItsGuarantee(t *testing.T) {
	clock := &testClock{t: now}
	pl := testPlugin(t, testArgs(func(a *Args) {
		a.NotStartedReleaseAfter = metav1.Duration{Duration: 5 * time.Minute}
	}), enforcingReport("n", "500M"))
	pl.now = clock.now
	stuck := stuckPod("n", now, map[string]string{annotations.EgressRequired: "400M"})
	pl.Ledger().ObservePod(stuck)
	if _, eg := pl.Ledger().GuaranteedOn("n", annotations.PodNetwork); eg != 400e6 {
		t.Fatalf("guaranteed %s, want the stuck pod's 400M", annotations.FormatRate(eg))
	}
	next := testPod(map[string]string{annotations.EgressRequired: "300M"})
	if st := pl.Filter(context.Background(), nil, next, nodeInfo("n")); st.IsSuccess() {
		t.Fatal("a 300M pod fits beside 400M guaranteed of 500M")
	}
	clock.advance(5 * time.Minute)
	fresh := enforcingReport("n", "500M")
	fresh.Status.SampleTime = &metav1.Time{Time: clock.t.Add(-time.Second)}
	pl.reports.(*heartbeat.Store).PutAt(fresh, clock.t)
	pl.Ledger().Sweep()
	if _, eg := pl.Ledger().GuaranteedOn("n", annotations.PodNetwork); eg != 0 {
		t.Errorf("guaranteed %s after the release, want 0", annotations.FormatRate(eg))
	}
	if st := pl.Filter(context.Background(), nil, next, nodeInfo("n")); !st.IsSuccess() {
		t.Fatalf("a 300M pod is refused after the stuck pod's guarantee was released: %v", st)
	}
	placed := stuckPod("n", clock.t, map[string]string{annotations.EgressRequired: "300M"})
	pl.Ledger().ObservePod(runningPod(placed, "n", clock.t))

	clock.advance(time.Minute)
	pl.Ledger().ObservePod(runningPod(stuck, "n", clock.t))
	if _, eg := pl.Ledger().GuaranteedOn("n", annotations.PodNetwork); eg != 300e6 {
		t.Errorf("guaranteed %s once the late pod started, want the 300M of the pod placed meanwhile, first", annotations.FormatRate(eg))
	}
}

// Another scheduler's pod reserves only while every container runs, and no more than
// the node had left: a DaemonSet asking 1P required whose container restarts in a loop
// does not keep a 10M pod off the node between its runs, and while it runs takes only
// what was left.
func TestForeignPodReservesWhatWasLeftWhileItRuns(t *testing.T) {
	pl := testPlugin(t, testArgs(nil), report("n", "200M", "200M", now.Add(-time.Second)))
	pl.Ledger().SetOurs(func(p *v1.Pod) bool { return p.Spec.SchedulerName == "sextant" })
	ours := testPod(map[string]string{annotations.IngressRequired: "50M"})
	pl.Ledger().Reserve(ours, "n", mustParse(t, ours))

	foreign := boundPod("n", -time.Minute, map[string]string{annotations.IngressRequired: "1P"}, "default-scheduler")
	running := runningPod(foreign, "n", now.Add(-5*time.Second))
	pl.Ledger().ObservePod(running)
	if in, _ := pl.Ledger().Reserved("n"); in != 200e6 {
		t.Errorf("running: reserved %s with 50M ours, want 200M (the 150M it found left)", annotations.FormatRate(in))
	}
	victim := testPod(map[string]string{annotations.IngressRequired: "10M"})
	if st := pl.Filter(context.Background(), nil, victim, nodeInfo("n")); st.IsSuccess() {
		t.Error("a 10M pod fits while the foreign pod holds all that was left")
	}

	crashed := running.DeepCopy()
	crashed.Status.ContainerStatuses[0].State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	crashed.Status.ContainerStatuses[0].LastTerminationState = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1,
		StartedAt: metav1.NewTime(now.Add(-5 * time.Second)), FinishedAt: metav1.NewTime(now)}}
	pl.Ledger().ObservePod(crashed)
	if in, _ := pl.Ledger().Reserved("n"); in != 50e6 {
		t.Errorf("waiting to restart: reserved %s, want only ours, 50M", annotations.FormatRate(in))
	}
	if st := pl.Filter(context.Background(), nil, victim, nodeInfo("n")); !st.IsSuccess() {
		t.Errorf("a 10M pod is refused while the foreign pod waits to restart: %v", st)
	}
	pl.Ledger().Reserve(victim, "n", mustParse(t, victim))

	pl.Ledger().ObservePod(running)
	if in, _ := pl.Ledger().Reserved("n"); in != 200e6 {
		t.Errorf("running again: reserved %s, want 200M (ours, the victim and the 140M left)", annotations.FormatRate(in))
	}
}

// The expected rate never reserves more than the pod's limit, whatever built the
// request (the annotations refuse expected above the limit).
func TestReservationNeverBeyondTheLimit(t *testing.T) {
	pl := testPlugin(t, testArgs(nil), report("n", "1G", "1G", now))
	req := annotations.BandwidthRequest{Network: annotations.PodNetwork,
		Ingress: annotations.Direction{Required: 10e6, HasRequired: true, Expected: 1e15, HasExpected: true, Limit: 100e6, HasLimit: true}}
	pl.Ledger().Reserve(testPod(nil), "n", req)
	if in, _ := pl.Ledger().Reserved("n"); in != 100e6 {
		t.Errorf("reserved %s, want the 100M limit", annotations.FormatRate(in))
	}
	if _, err := annotations.ParseBandwidth(map[string]string{annotations.IngressExpected: "1G", annotations.IngressLimit: "100M"}); err == nil {
		t.Error("expected above the limit parsed")
	}
}

func TestDeadlineArgs(t *testing.T) {
	for _, c := range []struct {
		reduce, release time.Duration
		wantErr         string
	}{
		{2 * time.Minute, 5 * time.Minute, ""},
		{0, 0, ""},
		{0, 5 * time.Minute, ""},
		{2 * time.Minute, 0, ""},
		{-time.Second, 0, "notStartedReduceAfter"},
		{0, -time.Second, "notStartedReleaseAfter"},
		{5 * time.Minute, 2 * time.Minute, "shorter than notStartedReduceAfter"},
	} {
		a := testArgs(func(a *Args) {
			a.NotStartedReduceAfter = metav1.Duration{Duration: c.reduce}
			a.NotStartedReleaseAfter = metav1.Duration{Duration: c.release}
		})
		err := a.Validate()
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("reduce %s release %s: %v, want %q", c.reduce, c.release, err, c.wantErr)
		}
	}
	if d := Defaults.Deadlines(); d != bandwidthclaim.DefaultDeadlines {
		t.Errorf("default deadlines %+v, want %+v", d, bandwidthclaim.DefaultDeadlines)
	}
}
