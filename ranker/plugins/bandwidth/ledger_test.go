package bandwidth

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
)

func gauge(t *testing.T) float64 {
	t.Helper()
	v, err := testutil.GetGaugeMetricValue(reservationsGauge)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLedgerBurstNeverOverfills schedules 20 pods one after another, as the scheduler
// does, onto nodes whose last reports predate all of them. Every pod placed must have
// found its required rate free after the reservations of the pods before it, so the
// required rates placed on a node never add up to more than it reported remaining.
func TestLedgerBurstNeverOverfills(t *testing.T) {
	remaining := map[string]int64{"node-1": 1000e6, "node-2": 700e6, "node-3": 450e6, "node-4": 300e6}
	for _, tc := range []struct {
		strategy           annotations.Strategy
		required, expected string
		wantPlaced         int
	}{
		// Reserving exactly what is required packs 1000/150=6, 4, 3 and 2 pods.
		{annotations.BestFit, "150M", "150M", 15},
		{annotations.MostHeadroom, "150M", "150M", 15},
		// Reserving 150M but needing only 100M free lets one more pod onto a node while
		// 100M-150M is left (1000M: 7, 700M: 5, 450M: 3, 300M: 2).
		{annotations.BestFit, "100M", "150M", 17},
		{annotations.MostHeadroom, "100M", "150M", 17},
	} {
		t.Run(fmt.Sprintf("%s %s/%s", tc.strategy, tc.required, tc.expected), func(t *testing.T) {
			var reports []*v1alpha1.NodeBandwidth
			var nodes []string
			for n, r := range remaining {
				reports = append(reports, report(n, annotations.FormatRate(r), "10G", now.Add(-time.Second)))
				nodes = append(nodes, n)
			}
			pl := testPlugin(t, testArgs(func(a *Args) { a.Strategy = tc.strategy }), reports...)
			gaugeBefore := gauge(t)
			requiredOn := map[string]int64{}
			placed := 0
			for i := 0; i < 20; i++ {
				pod := testPod(map[string]string{annotations.IngressRequired: tc.required, annotations.IngressExpected: tc.expected})
				c := schedule(t, pl, pod, nodes, true)
				if c.chosen == "" {
					continue
				}
				placed++
				requiredOn[c.chosen] += mustParse(t, pod).Ingress.Required
				for n, r := range remaining {
					if requiredOn[n] > r {
						t.Fatalf("after pod %d, %s holds %s required > %s remaining", i, n, annotations.FormatRate(requiredOn[n]), annotations.FormatRate(r))
					}
					if tc.required == tc.expected {
						if in, _ := pl.Ledger().Reserved(n); in > r {
							t.Fatalf("after pod %d, %s has %s reserved > %s remaining", i, n, annotations.FormatRate(in), annotations.FormatRate(r))
						}
					}
				}
			}
			if placed != tc.wantPlaced {
				t.Errorf("placed %d pods, want %d", placed, tc.wantPlaced)
			}
			if got := gauge(t) - gaugeBefore; got != float64(placed) {
				t.Errorf("reservations gauge grew by %v, want %d", got, placed)
			}
		})
	}
}

func runningPod(pod *v1.Pod, node string, startedAt time.Time) *v1.Pod {
	p := pod.DeepCopy()
	p.Spec.NodeName = node
	p.Status.Phase = v1.PodRunning
	p.Status.ContainerStatuses = []v1.ContainerStatus{
		{Name: "main", State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}}},
		{Name: "side", State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt.Add(-time.Second))}}},
	}
	return p
}

func TestLedgerRelease(t *testing.T) {
	podAnnotations := map[string]string{annotations.IngressRequired: "100M", annotations.EgressExpected: "50M"}
	setup := func(t *testing.T) (*BandwidthAware, *v1.Pod) {
		pl := testPlugin(t, testArgs(nil), report("n", "1G", "1G", now.Add(-time.Minute)))
		pod := testPod(podAnnotations)
		pl.Ledger().Reserve(pod, "n", mustParse(t, pod))
		if in, eg := pl.Ledger().Reserved("n"); in != 100e6 || eg != 50e6 {
			t.Fatalf("reserved %d/%d, want 100M/50M", in, eg)
		}
		return pl, pod
	}
	releases := func(t *testing.T, reason string) float64 {
		v, _ := testutil.GetCounterMetricValue(releasesTotal.WithLabelValues(reason))
		return v
	}

	t.Run("newer report before the pod runs keeps it", func(t *testing.T) {
		pl, pod := setup(t)
		bound := pod.DeepCopy()
		bound.Spec.NodeName = "n"
		pl.Ledger().ObservePod(bound)
		pl.Ledger().ObserveReport(report("n", "1G", "1G", now.Add(10*time.Minute)))
		if pl.Ledger().Len() != 1 {
			t.Fatal("a bound pod that is not running is not in any report yet")
		}
	})
	t.Run("report within a window of the start keeps it", func(t *testing.T) {
		pl, pod := setup(t)
		pl.Ledger().ObservePod(runningPod(pod, "n", now))
		pl.Ledger().ObserveReport(report("n", "1G", "1G", now.Add(59*time.Second)))
		if pl.Ledger().Len() != 1 {
			t.Fatal("the report's 60s peak window started before the pod ran")
		}
	})
	t.Run("report a window after the start releases it", func(t *testing.T) {
		pl, pod := setup(t)
		before := releases(t, releaseCovered)
		pl.Ledger().ObservePod(runningPod(pod, "n", now))
		pl.Ledger().ObserveReport(report("n", "1G", "1G", now.Add(60*time.Second)))
		if pl.Ledger().Len() != 0 {
			t.Fatal("want released by a covering report")
		}
		if in, eg := pl.Ledger().Reserved("n"); in != 0 || eg != 0 {
			t.Errorf("node still has %d/%d reserved", in, eg)
		}
		if releases(t, releaseCovered) != before+1 {
			t.Error("releases{reason=covered} not counted")
		}
		// Later status updates must not reserve the pod again.
		pl.Ledger().ObservePod(runningPod(pod, "n", now))
		if pl.Ledger().Len() != 0 {
			t.Error("a covered pod was reserved again")
		}
	})
	// A container that ran and finished, or crashed and waits to restart, has started;
	// one still waiting for its first start has not.
	for _, c := range []struct {
		name    string
		state   v1.ContainerStatus
		release bool
	}{
		{"a container completed", v1.ContainerStatus{Name: "setup", State: v1.ContainerState{
			Terminated: &v1.ContainerStateTerminated{StartedAt: metav1.NewTime(now.Add(-time.Minute)), FinishedAt: metav1.NewTime(now)}}}, true},
		{"a container crash-looping", v1.ContainerStatus{Name: "flaky",
			State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{StartedAt: metav1.NewTime(now), ExitCode: 1}}}, true},
		{"a container not started yet", v1.ContainerStatus{Name: "late",
			State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pl, pod := setup(t)
			running := runningPod(pod, "n", now)
			running.Status.ContainerStatuses = append(running.Status.ContainerStatuses, c.state)
			pl.Ledger().ObservePod(running)
			pl.Ledger().ObserveReport(report("n", "1G", "1G", now.Add(10*time.Minute)))
			if released := pl.Ledger().Len() == 0; released != c.release {
				t.Errorf("released by a report 10 minutes after the start: %v, want %v", released, c.release)
			}
		})
	}
	t.Run("partial report long after the start keeps it", func(t *testing.T) {
		pl, pod := setup(t)
		pl.Ledger().ObservePod(runningPod(pod, "n", now))
		// The node's agent restarted: its 5s window is all after the pod started, but
		// Filter does not trust it, so it must not let go of what it cannot show.
		pl.Ledger().ObserveReport(partialReport("n", "1G", "1G", now.Add(10*time.Minute)))
		if pl.Ledger().Len() != 1 {
			t.Fatal("released by a partial report")
		}
	})
	t.Run("report from another node does not release", func(t *testing.T) {
		pl, pod := setup(t)
		pl.Ledger().ObservePod(runningPod(pod, "n", now))
		pl.Ledger().ObserveReport(report("other", "1G", "1G", now.Add(time.Hour)))
		if pl.Ledger().Len() != 1 {
			t.Fatal("released by another node's report")
		}
	})
	t.Run("pod running when its node's report already covers it", func(t *testing.T) {
		pl := testPlugin(t, testArgs(nil), report("n", "1G", "1G", now.Add(2*time.Minute)))
		pod := testPod(podAnnotations)
		pl.Ledger().Reserve(pod, "n", mustParse(t, pod))
		pl.Ledger().ObservePod(runningPod(pod, "n", now))
		if pl.Ledger().Len() != 0 {
			t.Fatal("want released when the running pod is seen after the covering report")
		}
	})
	t.Run("unreserve", func(t *testing.T) {
		pl, pod := setup(t)
		before := releases(t, releaseUnreserved)
		pl.Unreserve(context.Background(), nil, pod, "n")
		pl.Unreserve(context.Background(), nil, pod, "n") // idempotent
		if pl.Ledger().Len() != 0 {
			t.Fatal("want released by Unreserve")
		}
		if in, _ := pl.Ledger().Reserved("n"); in != 0 {
			t.Error("node still has ingress reserved")
		}
		if releases(t, releaseUnreserved) != before+1 {
			t.Error("releases{reason=unreserved} should count once")
		}
	})
	t.Run("pod deleted", func(t *testing.T) {
		pl, pod := setup(t)
		pl.Ledger().podHandler().OnDelete(cache.DeletedFinalStateUnknown{Key: "default/x", Obj: pod})
		if pl.Ledger().Len() != 0 {
			t.Fatal("want released on delete")
		}
	})
	t.Run("pod finished", func(t *testing.T) {
		pl, pod := setup(t)
		done := runningPod(pod, "n", now)
		done.Status.Phase = v1.PodSucceeded
		pl.Ledger().podHandler().OnUpdate(pod, done)
		if pl.Ledger().Len() != 0 {
			t.Fatal("want released when the pod finished")
		}
	})
	t.Run("bound elsewhere moves the reservation", func(t *testing.T) {
		pl, pod := setup(t)
		moved := pod.DeepCopy()
		moved.Spec.NodeName = "m"
		pl.Ledger().ObservePod(moved)
		if node, ok := pl.Ledger().Has(pod.UID); !ok || node != "m" {
			t.Fatalf("reservation on %q, want m", node)
		}
		if in, _ := pl.Ledger().Reserved("n"); in != 0 {
			t.Error("old node keeps the reservation")
		}
	})
}

// TestLedgerRebuild is a leader change: a fresh ledger fed the pods the informer lists.
func TestLedgerRebuild(t *testing.T) {
	ann := map[string]string{annotations.IngressRequired: "100M", annotations.IngressExpected: "200M"}
	pl := testPlugin(t, testArgs(nil),
		report("n1", "1G", "1G", now.Add(-10*time.Second)),
		report("n2", "1G", "1G", now.Add(-10*time.Second)))

	pending := testPod(ann) // not bound: the scheduler will Reserve it itself
	justBound := testPod(ann)
	justBound.Spec.NodeName = "n1"
	startingUp := runningPod(testPod(ann), "n1", now.Add(-30*time.Second)) // running, report predates a full window
	longRunning := runningPod(testPod(ann), "n2", now.Add(-time.Hour))     // n2's report covers it
	finishedPod := runningPod(testPod(ann), "n2", now.Add(-time.Hour))
	finishedPod.Status.Phase = v1.PodFailed
	unannotated := runningPod(testPod(nil), "n1", now)
	malformed := testPod(map[string]string{annotations.IngressRequired: "lots"})
	malformed.Spec.NodeName = "n2"

	before, _ := testutil.GetCounterMetricValue(reservationsTotal.WithLabelValues("observed"))
	h := pl.Ledger().podHandler()
	for _, p := range []*v1.Pod{pending, justBound, startingUp, longRunning, finishedPod, unannotated, malformed} {
		h.OnAdd(p, true)
	}
	if got := pl.Ledger().Len(); got != 2 {
		t.Fatalf("rebuilt %d reservations, want 2 (justBound, startingUp)", got)
	}
	if in, _ := pl.Ledger().Reserved("n1"); in != 400e6 {
		t.Errorf("n1 reserved %s, want 400M", annotations.FormatRate(in))
	}
	if in, _ := pl.Ledger().Reserved("n2"); in != 0 {
		t.Errorf("n2 reserved %s, want 0", annotations.FormatRate(in))
	}
	after, _ := testutil.GetCounterMetricValue(reservationsTotal.WithLabelValues("observed"))
	if after != before+2 {
		t.Errorf("reservations_total{source=observed} grew by %v, want 2", after-before)
	}
	// The rebuilt reservations count in Filter: 1G - 400M leaves 600M.
	pod := testPod(map[string]string{annotations.IngressRequired: "700M"})
	if st := pl.Filter(context.Background(), nil, pod, nodeInfo("n1")); st.IsSuccess() {
		t.Error("Filter ignored rebuilt reservations")
	}
	// A later report covering startingUp releases it.
	pl.Ledger().ObserveReport(report("n1", "1G", "1G", now.Add(time.Minute)))
	if got := pl.Ledger().Len(); got != 1 {
		t.Errorf("%d reservations left, want 1 (justBound never ran)", got)
	}
}

// A pod another scheduler bound reserves only once it runs: Filter never checked what
// it asks for, and one that never starts would otherwise shut its node to every pod
// requiring bandwidth for as long as it stays. The ranker's own pods, seen bound after
// a restart or leader change, reserve at once, as before they run their traffic is in
// no report.
func TestLedgerOtherSchedulersPodsReserveOnceRunning(t *testing.T) {
	pl := testPlugin(t, testArgs(nil), report("n", "10G", "10G", now.Add(-10*time.Second)))
	pl.Ledger().SetOurs(func(p *v1.Pod) bool { return p.Spec.SchedulerName == "sextant" })
	huge := map[string]string{annotations.IngressRequired: "1000T"}
	foreign := testPod(huge)
	foreign.Spec.SchedulerName = "default-scheduler"
	foreign.Spec.NodeName = "n"
	foreign.Status.Phase = v1.PodPending // an init container that never ends
	h := pl.Ledger().podHandler()
	h.OnAdd(foreign, true)
	if got := pl.Ledger().Len(); got != 0 {
		t.Fatalf("%d reservations for another scheduler's pod that has not started, want 0", got)
	}
	x := testPod(map[string]string{annotations.IngressRequired: "1M"})
	if st := pl.Filter(context.Background(), nil, x, nodeInfo("n")); !st.IsSuccess() {
		t.Errorf("Filter(1M on n) = %v with another scheduler's pending pod asking 1000T on n, want success", st)
	}

	// Running, its traffic is in no report yet: reserved until one covers it.
	running := runningPod(foreign, "n", now.Add(-5*time.Second))
	h.OnUpdate(foreign, running)
	if in, _ := pl.Ledger().Reserved("n"); in == 0 {
		t.Errorf("another scheduler's running pod reserves nothing, want its rate until a report covers it")
	}
	pl.Ledger().ObserveReport(report("n", "10G", "10G", now.Add(2*time.Minute)))
	if got := pl.Ledger().Len(); got != 0 {
		t.Errorf("%d reservations after a report covering the running pod, want 0", got)
	}

	// The ranker's own pod, bound and not started, reserves at once.
	own := testPod(map[string]string{annotations.IngressRequired: "100M"})
	own.Spec.SchedulerName = "sextant"
	own.Spec.NodeName = "n"
	h.OnAdd(own, true)
	if in, _ := pl.Ledger().Reserved("n"); in != 100e6 {
		t.Errorf("the ranker's own bound pod reserves %s, want 100M", annotations.FormatRate(in))
	}
}

// TestReservationCapped: a pod reserves its expected rate up to what its node's network
// has left beside the other reservations, never less than its required rate, and only
// the required rate where the node reports nothing for the direction.
func TestReservationCapped(t *testing.T) {
	for _, c := range []struct {
		name     string
		ann      map[string]string
		reserved string // ingress reserved on n by an earlier pod
		want     int64
	}{
		{"expected within what is left", map[string]string{annotations.IngressExpected: "400M"}, "", 400e6},
		{"expected beyond the node", map[string]string{annotations.IngressRequired: "1", annotations.IngressExpected: "1P"}, "", 1e9},
		{"expected beyond what others left", map[string]string{annotations.IngressExpected: "1G"}, "700M", 300e6},
		{"required over what is left", map[string]string{annotations.IngressRequired: "500M", annotations.IngressExpected: "2G"}, "700M", 500e6},
		{"nothing left, expected only", map[string]string{annotations.IngressExpected: "1G"}, "1G", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			pl := testPlugin(t, testArgs(nil), report("n", "1G", "1G", now))
			if c.reserved != "" {
				other := testPod(map[string]string{annotations.IngressRequired: c.reserved})
				other.UID = "other"
				pl.Ledger().Reserve(other, "n", mustParse(t, other))
			}
			pod := testPod(c.ann)
			before, _ := pl.Ledger().Reserved("n")
			pl.Ledger().Reserve(pod, "n", mustParse(t, pod))
			if in, _ := pl.Ledger().Reserved("n"); in-before != c.want {
				t.Errorf("reserved %s, want %s", annotations.FormatRate(in-before), annotations.FormatRate(c.want))
			}
			pl.Ledger().Unreserve(pod.UID, "n")
			if in, _ := pl.Ledger().Reserved("n"); in != before {
				t.Errorf("after Unreserve %s reserved, want %s back", annotations.FormatRate(in), annotations.FormatRate(before))
			}
		})
	}
	t.Run("node without a report", func(t *testing.T) {
		pl := testPlugin(t, testArgs(nil))
		pod := testPod(map[string]string{annotations.IngressRequired: "100M", annotations.IngressExpected: "1P"})
		pl.Ledger().Reserve(pod, "n", mustParse(t, pod))
		if in, _ := pl.Ledger().Reserved("n"); in != 100e6 {
			t.Errorf("reserved %s, want the required 100M", annotations.FormatRate(in))
		}
	})
}

func TestReserveSkipsPodsWithoutRates(t *testing.T) {
	pl := testPlugin(t, testArgs(nil))
	for i, ann := range []map[string]string{nil, {annotations.BandwidthStrategy: "best-fit"}, {"app": "x"}} {
		pod := testPod(ann)
		if st := pl.Reserve(context.Background(), nil, pod, "n"); !st.IsSuccess() {
			t.Fatalf("case %d: %v", i, st)
		}
	}
	if pl.Ledger().Len() != 0 {
		t.Error("pods without rates must not reserve")
	}
}

// Filter reads a node's reserved totals from its heartbeat record without the ledger's
// lock. Whatever order reservations, releases and the record's coming and going take,
// that read must equal the ledger's own books, and two ledgers sharing a Store (two
// profiles) must each read their own.
func TestReservedOnMatchesTheBooks(t *testing.T) {
	store := heartbeat.NewFromObjects(report("with-report", "10G", "10G", now))
	l, other := NewLedger(store), NewLedger(store)
	req := annotations.BandwidthRequest{Ingress: annotations.Direction{Required: 100, HasRequired: true}, Egress: annotations.Direction{Required: 30, HasRequired: true}}
	a, b := testPod(nil), testPod(nil)
	check := func(step, node string, wantIn, wantEg int64) {
		t.Helper()
		if in, eg := l.Reserved(node); in != wantIn || eg != wantEg {
			t.Errorf("%s: Reserved(%s) = %d/%d, want %d/%d", step, node, in, eg, wantIn, wantEg)
		}
		if rec := store.Node(node); rec != nil {
			if in, eg := l.reservedOn(rec, annotations.PodNetwork); in != wantIn || eg != wantEg {
				t.Errorf("%s: reservedOn(%s) = %d/%d, want %d/%d", step, node, in, eg, wantIn, wantEg)
			}
			if in, eg := other.reservedOn(rec, annotations.PodNetwork); in != 0 || eg != 0 {
				t.Errorf("%s: the other ledger reads %d/%d on %s, want its own 0/0", step, in, eg, node)
			}
		}
	}
	check("empty", "with-report", 0, 0)
	l.Reserve(a, "with-report", req)
	check("one reservation", "with-report", 100, 30)
	l.Reserve(b, "with-report", req)
	check("two reservations", "with-report", 200, 60)
	l.Unreserve(a.UID, "with-report")
	l.Unreserve(b.UID, "with-report")
	check("all released", "with-report", 0, 0)
	l.Reserve(a, "with-report", req)
	check("reserved again after the node's entry was dropped", "with-report", 100, 30)

	// A reservation on a node whose report comes later (an expected-only pod went there).
	l.Reserve(b, "late-report", req)
	check("no record yet", "late-report", 100, 30)
	store.Put(report("late-report", "10G", "10G", now))
	check("the record came after the reservation", "late-report", 100, 30)
	store.Delete(report("late-report", "10G", "10G", now))
	l.Unreserve(b.UID, "late-report")
	store.Put(report("late-report", "10G", "10G", now))
	check("released while the record was gone, then the record came back", "late-report", 0, 0)
}

// Unreserve undoes only the attempt's own Reserve: a reservation the informer showed
// bound (moved to the pod's real node, or confirmed on the reserved one) survives the
// attempt's failed Binding (409 Conflict after a leader change, or a lost response).
func TestUnreserveKeepsBoundReservation(t *testing.T) {
	for _, c := range []struct {
		name     string
		seenOn   string // where the informer shows the pod bound before Unreserve; "" for not seen
		wantNode string // where the pod's reservation is after Unreserve; "" for none
	}{
		{"binding failed, pod never seen bound", "", ""},
		{"old leader bound it elsewhere (seen late)", "x", "x"},
		{"binding applied but its response lost", "y", "y"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pl := testPlugin(t, testArgs(nil), report("x", "1G", "1G", now), report("y", "1G", "1G", now))
			pod := testPod(map[string]string{annotations.IngressRequired: "800M"})
			pl.Ledger().Reserve(pod, "y", mustParse(t, pod))
			if c.seenOn != "" {
				bound := pod.DeepCopy()
				bound.Spec.NodeName = c.seenOn
				pl.Ledger().ObservePod(bound)
			}
			pl.Unreserve(context.Background(), nil, pod, "y")
			pl.Unreserve(context.Background(), nil, pod, "y") // idempotent
			node, ok := pl.Ledger().Has(pod.UID)
			if node != c.wantNode || ok != (c.wantNode != "") {
				t.Errorf("after Unreserve: reservation on %q (held %v), want %q", node, ok, c.wantNode)
			}
			for _, n := range []string{"x", "y"} {
				want := int64(0)
				if n == c.wantNode {
					want = 800e6
				}
				if in, _ := pl.Ledger().Reserved(n); in != want {
					t.Errorf("%s reserved %s, want %s", n, annotations.FormatRate(in), annotations.FormatRate(want))
				}
			}
		})
	}
}

// The informer shows the pod bound on y before this scheduler's attempt, which placed it
// on z, reaches Reserve: the attempt's Binding then conflicts and its Unreserve(z) must
// leave y holding the pod's reservation, not drop one Reserve moved to z.
func TestReserveKeepsBoundReservation(t *testing.T) {
	pl := testPlugin(t, testArgs(nil), report("y", "1G", "1G", now), report("z", "1G", "1G", now))
	pod := testPod(map[string]string{annotations.IngressRequired: "800M"})
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "y"
	pl.Ledger().ObservePod(bound)
	pl.Ledger().Reserve(pod, "z", mustParse(t, pod))
	pl.Unreserve(context.Background(), nil, pod, "z")
	if node, ok := pl.Ledger().Has(pod.UID); !ok || node != "y" {
		t.Errorf("after Unreserve(z): reservation on %q (held %v), want y", node, ok)
	}
	for n, want := range map[string]int64{"y": 800e6, "z": 0} {
		if in, _ := pl.Ledger().Reserved(n); in != want {
			t.Errorf("%s reserved %s, want %s", n, annotations.FormatRate(in), annotations.FormatRate(want))
		}
	}
}
