package report

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/v1alpha1"
)

// waitFor polls cond until it holds or a deadline far beyond what it needs passes: the
// writes it waits for run in a goroutine of their own once the fake clock fires.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// holdersReporter is a started reporter on a fake clock that has published a topology
// of two GPUs once; it returns that topology to offer again, the count of writes, and
// the holder published for a device.
func holdersReporter(t *testing.T) (*TopologyReporter, *clocktesting.FakeClock, v1alpha1.Topology, func() int, func(addr string) string) {
	t.Helper()
	gpu := func(addr string) v1alpha1.PCIDevice {
		return v1alpha1.PCIDevice{Address: addr, Class: "0x030200", Kind: v1alpha1.KindGPU, NUMANode: ptr.To[int32](0), Health: v1alpha1.Healthy}
	}
	topo := v1alpha1.Topology{
		NUMANodes:  []v1alpha1.NUMANode{{ID: 0, CPUs: []int32{0, 1}, MemoryBytes: 1 << 30, Distances: []int32{10}}},
		PCIDevices: []v1alpha1.PCIDevice{gpu("0000:3b:00.0"), gpu("0000:3c:00.0")},
	}
	dyn, kube := newFakes(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	r := NewTopologyReporter(TopologyConfig{AgentVersion: "test"}, dyn, kube, "node-1", NewMetrics(nil), clk)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if wrote, err := r.Offer(ctx, topo); !wrote || err != nil {
		t.Fatalf("first offer: wrote %v, err %v", wrote, err)
	}
	writes := func() int { return countActions(dyn, "update", "status") }
	holder := func(addr string) string {
		for _, d := range publishedTopology(t, dyn, "node-1").Status.PCIDevices {
			if d.Address == addr && d.Holder != nil {
				return d.Holder.Namespace + "/" + d.Holder.Name
			}
		}
		return ""
	}
	return r, clk, topo, writes, holder
}

func held(name string) map[string]v1alpha1.DeviceHolder {
	return map[string]v1alpha1.DeviceHolder{"0000:3b:00.0": {Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
}

// settled waits until a write holders brought forward has finished, not just reached the
// API server: the reporter counts the interval from its end.
func settled(r *TopologyReporter) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
}

// idle says no write for holders is scheduled or under way.
func idle(r *TopologyReporter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.pending
}

// TestTopologyReporterWritesNewHoldersSoon: new holders are written without waiting for
// the next Offer (the topology tick); the same holders again write nothing.
func TestTopologyReporterWritesNewHoldersSoon(t *testing.T) {
	r, clk, topo, writes, holder := holdersReporter(t)
	clk.Step(time.Minute) // long past the last write: nothing holds the next one back

	r.SetHolders(held("train"))
	clk.Step(0) // a timer due now fires when the fake clock is next set
	waitFor(t, "the new holder's write, with no Offer", func() bool { return writes() == 2 })
	settled(r)
	if got := holder("0000:3b:00.0"); got != "ns/train" {
		t.Errorf("published holder = %q, want ns/train", got)
	}

	clk.Step(time.Minute)
	r.SetHolders(held("train")) // an equal map, not the same one
	if clk.HasWaiters() {
		t.Error("unchanged holders scheduled a write")
	}
	if wrote, err := r.Offer(context.Background(), topo); wrote || err != nil {
		t.Errorf("the next Offer: wrote %v, err %v; want nothing written, nothing changed", wrote, err)
	}
	if n := writes(); n != 2 {
		t.Errorf("%d writes, want 2: the first Offer and the one for the new holder", n)
	}
}

// TestTopologyReporterHolderWritesMinInterval: holders that keep changing are written
// holderWriteInterval after the write before them, whatever made that, the latest of
// them in one write.
func TestTopologyReporterHolderWritesMinInterval(t *testing.T) {
	r, clk, topo, writes, holder := holdersReporter(t)
	const step = holderWriteInterval / 4

	// Just after a write, flapping holders wait out the interval, then go as one write.
	for _, name := range []string{"a", "b", "a", "c"} {
		r.SetHolders(held(name))
	}
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%d writes scheduled for flapping holders, want 1", n)
	}
	clk.Step(holderWriteInterval - time.Millisecond)
	if n, w := clk.Waiters(), writes(); n != 1 || w != 1 {
		t.Fatalf("before the interval: %d scheduled, %d writes; want the write still scheduled, only the Offer's made", n, w)
	}
	clk.Step(time.Millisecond)
	waitFor(t, "the holders' write once the interval passed", func() bool { return writes() == 2 })
	settled(r)
	if got := holder("0000:3b:00.0"); got != "ns/c" {
		t.Errorf("published holder = %q, want the latest, ns/c", got)
	}

	// A change right after that write waits a whole interval again.
	r.SetHolders(held("d"))
	clk.Step(holderWriteInterval - time.Millisecond)
	if w := writes(); w != 2 {
		t.Fatalf("%d writes before the interval after the last, want 2", w)
	}
	clk.Step(time.Millisecond)
	waitFor(t, "the next holders' write", func() bool { return writes() == 3 })
	settled(r)
	if got := holder("0000:3b:00.0"); got != "ns/d" {
		t.Errorf("published holder = %q, want ns/d", got)
	}

	// An Offer (the topology tick) that writes the holders first moves the scheduled
	// write back, and that write then has nothing new to say.
	clk.Step(2 * step)
	r.SetHolders(held("e")) // due 2 steps from now
	clk.Step(step)
	if wrote, err := r.Offer(context.Background(), topo); !wrote || err != nil {
		t.Fatalf("offer with new holders: wrote %v, err %v", wrote, err)
	}
	clk.Step(step) // the scheduled write finds the Offer's a step ago
	waitFor(t, "the scheduled write to wait out the rest of the interval", func() bool { return clk.Waiters() == 1 })
	if w := writes(); w != 4 {
		t.Fatalf("%d writes, want 4", w)
	}
	clk.Step(3 * step)
	waitFor(t, "the rescheduled write to run", func() bool { return idle(r) })
	settled(r)
	if w, h := writes(), holder("0000:3b:00.0"); w != 4 || h != "ns/e" {
		t.Errorf("%d writes, holder %q; want 4, ns/e: the Offer published the holders already", w, h)
	}
}

// TestTopologyReporterPublishedHolders: a reporter that starts where an earlier agent
// published holders hands them to the device audit.
func TestTopologyReporterPublishedHolders(t *testing.T) {
	dyn, kube := newFakes(t)
	ctx := context.Background()
	start := func() *TopologyReporter {
		r := NewTopologyReporter(TopologyConfig{AgentVersion: "test"}, dyn, kube, "node-1", NewMetrics(nil), clock.RealClock{})
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := start()
	if got := first.PublishedHolders(); len(got) != 0 {
		t.Errorf("first start: published holders %v, want none", got)
	}
	first.SetHolders(held("train"))
	topo := v1alpha1.Topology{PCIDevices: []v1alpha1.PCIDevice{
		{Address: "0000:3b:00.0", Class: "0x030200", Kind: v1alpha1.KindGPU, Health: v1alpha1.Healthy},
	}}
	if wrote, err := first.Offer(ctx, topo); !wrote || err != nil {
		t.Fatalf("offer: wrote %v, err %v", wrote, err)
	}
	if got, want := start().PublishedHolders(), held("train"); !maps.Equal(got, want) {
		t.Errorf("after a restart: published holders %v, want %v", got, want)
	}
}

// An agent that restarts while the API server is unavailable waits to read what it
// published before: going on without it would publish the held GPU as free and drop the
// GPU that vanished while the agent was down.
func TestTopologyReporterStartWaitsForTheAPIServer(t *testing.T) {
	saved := startRetry
	startRetry.Duration = time.Millisecond
	t.Cleanup(func() { startRetry = saved })

	gpu := func(addr string) v1alpha1.PCIDevice {
		return v1alpha1.PCIDevice{Address: addr, Class: "0x030200", Kind: v1alpha1.KindGPU, Driver: "nvidia", NUMANode: ptr.To[int32](0), Health: v1alpha1.Healthy}
	}
	train := gpu("0000:3b:00.0")
	train.Holder = &v1alpha1.DeviceHolder{Namespace: "ns", Name: "train", UID: "uid-train"}
	gone := gpu("0000:3c:00.0")
	gone.Health, gone.Driver = v1alpha1.Unhealthy, ""
	numa := []v1alpha1.NUMANode{{ID: 0, CPUs: []int32{0, 1}, MemoryBytes: 1 << 30, Distances: []int32{10}}}
	prev := &v1alpha1.NodeTopology{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeTopology"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status:     v1alpha1.NodeTopologyStatus{Topology: v1alpha1.Topology{NUMANodes: numa, PCIDevices: []v1alpha1.PCIDevice{train, gone}}},
	}

	for _, tc := range []struct {
		name string
		errs []error // the first GETs' answers, in turn
		// wantErr: Start gives up, and the reporter starts from nothing.
		wantErr bool
	}{
		{name: "unavailable, then a timeout", errs: []error{apierrors.NewServiceUnavailable("restarting"), apierrors.NewTimeoutError("busy", 1)}},
		{name: "connection refused", errs: []error{errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")}},
		{name: "forbidden", errs: []error{apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "nodetopologies"}, "node-1", errors.New("no"))}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dyn, kube := newFakes(t, prev.DeepCopy())
			gets := 0
			dyn.PrependReactor("get", "nodetopologies", func(clienttesting.Action) (bool, runtime.Object, error) {
				if gets++; gets <= len(tc.errs) {
					return true, nil, tc.errs[gets-1]
				}
				return false, nil, nil
			})
			r := NewTopologyReporter(TopologyConfig{AgentVersion: "test"}, dyn, kube, "node-1", NewMetrics(nil), clock.RealClock{})
			ctx := context.Background()
			err := r.Start(ctx)
			if tc.wantErr {
				if err == nil || gets != 1 {
					t.Fatalf("Start: %v after %d reads, want the error at once", err, gets)
				}
				return
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if want := len(tc.errs) + 1; gets != want {
				t.Errorf("Start read %d times, want %d", gets, want)
			}
			if got := r.PublishedHolders(); !maps.Equal(got, map[string]v1alpha1.DeviceHolder{train.Address: *train.Holder}) {
				t.Errorf("published holders %v, want %s's", got, train.Holder.Name)
			}
			r.SetHolders(r.PublishedHolders())
			// The GPU that vanished is still absent; the held one is there.
			if wrote, err := r.Offer(ctx, v1alpha1.Topology{NUMANodes: numa, PCIDevices: []v1alpha1.PCIDevice{gpu(train.Address)}}); !wrote || err != nil {
				t.Fatalf("offer: wrote %v, err %v", wrote, err)
			}
			got := map[string]v1alpha1.PCIDevice{}
			for _, d := range publishedTopology(t, dyn, "node-1").Status.PCIDevices {
				got[d.Address] = d
			}
			if d, ok := got[gone.Address]; !ok || d.Health != v1alpha1.Unhealthy {
				t.Errorf("%s published as %+v (present %v), want Unhealthy", gone.Address, d, ok)
			}
			if d := got[train.Address]; d.Holder == nil || d.Holder.Name != "train" {
				t.Errorf("%s published with holder %v, want ns/train", train.Address, d.Holder)
			}
		})
	}
}

// Start gives up when the agent stops, saying why it waited.
func TestTopologyReporterStartEndsWithTheAgent(t *testing.T) {
	saved := startRetry
	startRetry.Duration = time.Millisecond
	t.Cleanup(func() { startRetry = saved })
	dyn, kube := newFakes(t)
	dyn.PrependReactor("get", "nodetopologies", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("restarting")
	})
	r := NewTopologyReporter(TopologyConfig{AgentVersion: "test"}, dyn, kube, "node-1", NewMetrics(nil), clock.RealClock{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := r.Start(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "restarting") {
		t.Errorf("Start: %v, want the context's end and the API server's last error", err)
	}
}
