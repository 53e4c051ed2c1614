package cri

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"sextant.io/sextant/internal/liveness"
)

// liveRuntime answers Version, and streams to each subscriber the exits sent on exits.
type liveRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	eventsapi.UnimplementedEventsServer
	exits chan *apievents.TaskExit
}

func (r *liveRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeVersion: "1"}, nil
}

func (r *liveRuntime) Subscribe(_ *eventsapi.SubscribeRequest, stream eventsapi.Events_SubscribeServer) error {
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case ev := <-r.exits:
			payload, err := anypb.New(ev)
			if err != nil {
				return err
			}
			if err := stream.Send(&eventsapi.Envelope{Topic: exitTopic, Namespace: DefaultNamespace, Event: payload}); err != nil {
				return err
			}
		}
	}
}

// fakeContainerd is a runtime on a unix socket that can be stopped and started again
// at the same path, as containerd restarts: the old socket file is removed and a new
// one made.
type fakeContainerd struct {
	t    *testing.T
	sock string
	rt   *liveRuntime
	srv  *grpc.Server
}

func newFakeContainerd(t *testing.T) *fakeContainerd {
	f := &fakeContainerd{t: t, sock: shortSocket(t), rt: &liveRuntime{exits: make(chan *apievents.TaskExit)}}
	f.start()
	t.Cleanup(func() { f.stop() })
	return f
}

func (f *fakeContainerd) start() {
	f.t.Helper()
	// containerd removes a socket file left behind before it listens.
	_ = os.Remove(f.sock)
	l, err := net.Listen("unix", f.sock)
	if err != nil {
		f.t.Skipf("unix socket: %v", err)
	}
	f.srv = grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(f.srv, f.rt)
	eventsapi.RegisterEventsServer(f.srv, f.rt)
	go func() { _ = f.srv.Serve(l) }()
}

// stop ends the server as a dying containerd does: every connection and stream cut.
func (f *fakeContainerd) stop() {
	if f.srv != nil {
		f.srv.Stop()
		f.srv = nil
	}
}

// until polls cond every 10ms for up to a minute: long enough for any machine, and
// the test asserts only that it came true, not how soon.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClientReconnectsAfterRuntimeRestart: once the runtime restarts (a new socket file
// at the same path), the same Client's calls work again and the exit stream, which
// broke with the old runtime, can be opened again and delivers exits: nothing the
// client holds stays bound to the dead runtime.
func TestClientReconnectsAfterRuntimeRestart(t *testing.T) {
	f := newFakeContainerd(t)
	c, err := Dial(f.sock, "", WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.Version(ctx); err != nil {
		t.Fatalf("Version before the restart: %v", err)
	}
	exits, errc := c.TaskEvents(ctx)
	f.rt.exits <- &apievents.TaskExit{ContainerID: "a", ExitStatus: 1}
	if e := <-exits; e.ContainerID != "a" {
		t.Fatalf("exit before the restart: %+v", e)
	}

	f.stop()
	for range exits {
	}
	if err := <-errc; err == nil {
		t.Fatal("the exit stream ended without an error when the runtime went away")
	}
	if _, err := c.Version(ctx); err == nil {
		t.Fatal("Version answered with the runtime down")
	}

	f.start()
	until(t, "Version after the restart", func() bool { _, err := c.Version(ctx); return err == nil })
	exits, _ = c.TaskEvents(ctx)
	f.rt.exits <- &apievents.TaskExit{ContainerID: "b", ExitStatus: 0}
	if e := <-exits; e.ContainerID != "b" {
		t.Fatalf("exit after the restart: %+v", e)
	}
}

// TestProberFailsLivenessWhileTheRuntimeIsGone: the prober's last answer stops moving
// while the runtime is down, so /healthz's check of it fails once the deadline has
// passed since; it moves again once the runtime is back. The evidence is the prober's
// own record (failed probes counted, the time of the last answer), not how soon
// anything happened.
func TestProberFailsLivenessWhileTheRuntimeIsGone(t *testing.T) {
	f := newFakeContainerd(t)
	c, err := Dial(f.sock, "", WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const deadline = time.Minute
	p := NewProber(c, 20*time.Millisecond, prometheus.NewRegistry(), logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	var now time.Time
	checker := liveness.NewChecker(func() time.Time { return now })
	checker.Add("container-runtime", deadline, p.LastAnswered)
	stuck := func() bool { return checker.Check()[0].Stuck }

	until(t, "a first answer", func() bool { return !p.LastAnswered().IsZero() })
	now = p.LastAnswered().Add(deadline - time.Second)
	if stuck() {
		t.Fatal("stuck with the runtime answering")
	}

	f.stop()
	failed := testutil.ToFloat64(p.failures)
	until(t, "three failed probes", func() bool { return testutil.ToFloat64(p.failures) >= failed+3 })
	last := p.LastAnswered()
	now = last.Add(deadline + time.Second)
	if !stuck() {
		t.Errorf("not stuck %s after the runtime's last answer, with it down", deadline+time.Second)
	}

	f.start()
	until(t, "an answer after the restart", func() bool { return p.LastAnswered().After(last) })
	now = p.LastAnswered()
	if stuck() {
		t.Error("still stuck once the runtime answers again")
	}
}

func TestProbeInterval(t *testing.T) {
	for deadline, want := range map[time.Duration]time.Duration{
		15 * time.Second:        5 * time.Second,
		time.Second:             time.Second / 3,
		time.Millisecond:        10 * time.Millisecond,
		10 * time.Minute:        10 * time.Second,
		DefaultLivenessDeadline: 10 * time.Second,
	} {
		if got := ProbeInterval(deadline); got != want {
			t.Errorf("ProbeInterval(%s) = %s, want %s", deadline, got, want)
		}
	}
}
