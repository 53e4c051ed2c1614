package sidecar

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"sextant.io/sextant/agent/nodepods"
	"sextant.io/sextant/cri"
)

// blockingRuntime answers ContainerRecords only while open; closed, every call waits
// (as on a runtime without a deadline that stopped answering).
type blockingRuntime struct {
	*fakeRuntime
	open    atomic.Bool
	release chan struct{}
	blocked atomic.Int32
}

func (b *blockingRuntime) ContainerRecords(ctx context.Context, uid string) ([]cri.Container, error) {
	if !b.open.Load() {
		b.blocked.Add(1)
		<-b.release
		b.blocked.Add(-1)
	}
	return b.fakeRuntime.ContainerRecords(ctx, uid)
}

// LastAlive moves with the resync while the workers work, stays put while the only
// worker is blocked, and moves again once it is free.
func TestLastAliveShowsBlockedWorkers(t *testing.T) {
	rt := &blockingRuntime{fakeRuntime: newFakeRuntime(), release: make(chan struct{})}
	rt.open.Store(true)
	kube := fake.NewClientset()
	if _, err := kube.CoreV1().Pods("ns").Create(context.Background(), jobPod("p", "uid-p", corev1.RestartPolicyNever), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	informer := nodepods.NewInformer(kube, node)
	const resync = 20 * time.Millisecond
	term, err := New(Config{NodeName: node, Resync: resync, Workers: 1, StateDir: t.TempDir()}, kube, informer, rt, nil, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if term.LivenessInterval() != resync {
		t.Errorf("LivenessInterval = %v, want the resync", term.LivenessInterval())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go informer.Run(ctx.Done())
	go func() { defer close(done); _ = term.Run(ctx) }()
	defer func() { cancel(); <-done }()

	moves := func(within time.Duration) bool {
		from := term.LastAlive()
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if term.LastAlive().After(from) {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}
	waitFor(t, "the terminator to sync", term.Ready)
	if !moves(5 * time.Second) {
		t.Fatal("LastAlive does not move while the terminator works")
	}
	rt.open.Store(false)
	waitFor(t, "the worker to block on the runtime", func() bool { return rt.blocked.Load() > 0 })
	time.Sleep(2 * resync) // a probe taken just before the block
	if moves(15 * resync) {
		t.Fatal("LastAlive moves while the only worker is blocked")
	}
	rt.open.Store(true)
	close(rt.release)
	if !moves(5 * time.Second) {
		t.Fatal("LastAlive does not move again once the worker is free")
	}
}
