package numapin

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"sextant.io/sextant/agent/nodepods"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/cri"
)

// LastAlive moves with the resync while the workers work, stays put while the only pod
// worker is blocked (here on the topology), and moves again once it is free.
func TestLastAliveShowsBlockedWorkers(t *testing.T) {
	tr := newTree(t, false)
	kube := fake.NewClientset(pod("p", uidA, "0"))
	var open atomic.Bool
	release := make(chan struct{})
	var blocked atomic.Int32
	numa := func() ([]v1alpha1.NUMANode, error) {
		if !open.Load() {
			blocked.Add(1)
			<-release
		}
		return twoNUMA, nil
	}
	inf := nodepods.NewInformer(kube, node)
	const resync = 20 * time.Millisecond
	p, err := New(Config{NodeName: node, CgroupRoot: tr.root, Resync: resync, Workers: 1}, kube, inf,
		&fakeRuntime{containers: map[string][]cri.Container{}, cpusets: map[string][2]string{}}, numa, nil,
		NewMetrics(nil), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if p.LivenessInterval() != kubepodsRetry {
		t.Errorf("LivenessInterval = %v, want the kubelet cgroups' retry (longer than the resync)", p.LivenessInterval())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go inf.Run(ctx.Done())
	go func() { defer close(done); _ = p.Run(ctx) }()
	defer func() {
		cancel()
		if blocked.Load() > 0 && open.CompareAndSwap(false, true) {
			close(release)
		}
		<-done
	}()

	moves := func(within time.Duration) bool {
		from := p.LastAlive()
		err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, within, true,
			func(context.Context) (bool, error) { return p.LastAlive().After(from), nil })
		return err == nil
	}
	// Blocked from the start: the pod's first decision waits on the topology.
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, eventuallyWithin, true,
		func(context.Context) (bool, error) { return blocked.Load() > 0, nil }); err != nil {
		t.Fatal("the pod worker never asked for the topology")
	}
	// LastAlive is the older of the two workers' beats: once the runtime worker's has
	// passed the blocked pod worker's, it is the pod worker's and must stay.
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, eventuallyWithin, true,
		func(context.Context) (bool, error) { return !p.rtBeat.Last().Before(p.beat.Last()), nil }); err != nil {
		t.Fatal("the runtime worker's beat never passed the blocked pod worker's")
	}
	if moves(15 * resync) {
		t.Fatal("LastAlive moves while the only pod worker is blocked")
	}
	open.Store(true)
	close(release)
	if !moves(eventuallyWithin) {
		t.Fatal("LastAlive does not move once the worker is free")
	}
	if !moves(eventuallyWithin) {
		t.Fatal("LastAlive does not keep moving with the resync")
	}
}

// While the kubelet's cgroups are not there, the pinner waits, and that is alive.
func TestLastAliveWhileWaitingForTheKubelet(t *testing.T) {
	kube := fake.NewClientset()
	inf := nodepods.NewInformer(kube, node)
	p, err := New(Config{NodeName: node, CgroupRoot: t.TempDir(), Resync: 20 * time.Millisecond}, kube, inf,
		&fakeRuntime{}, func() ([]v1alpha1.NUMANode, error) { return twoNUMA, nil }, nil,
		NewMetrics(nil), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, eventuallyWithin, true,
		func(context.Context) (bool, error) { return !p.LastAlive().Before(before), nil }); err != nil {
		t.Fatal("LastAlive does not move while the pinner waits for the kubelet's cgroups")
	}
	if p.Ready() {
		t.Error("ready without the kubelet's cgroups")
	}
}
