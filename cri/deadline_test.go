package cri

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// hungRuntime answers nothing: every handler waits for its caller to give up.
type hungRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	containersapi.UnimplementedContainersServer
	eventsapi.UnimplementedEventsServer
	stopCalled chan stopDeadline // the deadline StopContainer's caller gave it
}

// stopDeadline is the deadline a call reached the runtime with: when, and how much of
// it was left then.
type stopDeadline struct {
	at   time.Time
	left time.Duration
}

func (h *hungRuntime) hang(ctx context.Context) error {
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

func (h *hungRuntime) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return nil, h.hang(ctx)
}

func (h *hungRuntime) ListContainers(ctx context.Context, _ *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return nil, h.hang(ctx)
}

func (h *hungRuntime) ContainerStatus(ctx context.Context, _ *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return nil, h.hang(ctx)
}

func (h *hungRuntime) UpdateContainerResources(ctx context.Context, _ *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	return nil, h.hang(ctx)
}

func (h *hungRuntime) StopContainer(ctx context.Context, _ *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	if d, ok := ctx.Deadline(); ok {
		h.stopCalled <- stopDeadline{at: d, left: time.Until(d)}
	}
	return nil, h.hang(ctx)
}

// hungTasks is hungRuntime's task service (a type of its own: some of its methods have
// the names of other services').
type hungTasks struct {
	tasksapi.UnimplementedTasksServer
	h *hungRuntime
}

func (t hungTasks) Get(ctx context.Context, _ *tasksapi.GetRequest) (*tasksapi.GetResponse, error) {
	return nil, t.h.hang(ctx)
}

func (h *hungRuntime) Update(ctx context.Context, _ *containersapi.UpdateContainerRequest) (*containersapi.UpdateContainerResponse, error) {
	return nil, h.hang(ctx)
}

func (h *hungRuntime) List(ctx context.Context, _ *containersapi.ListContainersRequest) (*containersapi.ListContainersResponse, error) {
	return nil, h.hang(ctx)
}

func shortSocket(t *testing.T) string {
	t.Helper()
	// Unix socket paths are limited to ~108 bytes; t.TempDir() may be longer.
	dir, err := filepath.Abs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "c.sock")
}

func serveHung(t *testing.T) (string, *hungRuntime) {
	t.Helper()
	sock := shortSocket(t)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix socket: %v", err)
	}
	h := &hungRuntime{stopCalled: make(chan stopDeadline, 1)}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, h)
	containersapi.RegisterContainersServer(srv, h)
	eventsapi.RegisterEventsServer(srv, h)
	tasksapi.RegisterTasksServer(srv, hungTasks{h: h})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return sock, h
}

// within runs call and checks it fails with DeadlineExceeded, not before want has
// passed. How long after is the machine's business; a call that took a minute more
// than want had no deadline at all.
func within(t *testing.T, what string, want time.Duration, call func() error) {
	t.Helper()
	withinEnding(t, what, want, call, codes.DeadlineExceeded)
}

// withinEnding is within for a call that may end with any of codes.
func withinEnding(t *testing.T, what string, want time.Duration, call func() error, codes ...codes.Code) {
	t.Helper()
	start := time.Now()
	err := call()
	took := time.Since(start)
	if !slices.Contains(codes, status.Code(err)) {
		t.Errorf("%s on a hung runtime: err %v, want one of %v", what, err, codes)
	}
	if took < want-50*time.Millisecond || took > want+time.Minute {
		t.Errorf("%s on a hung runtime returned after %v, want at its deadline, %v", what, took, want)
	}
}

func TestHungRuntimeCallsHitTheDeadline(t *testing.T) {
	sock, h := serveHung(t)
	const timeout = 300 * time.Millisecond
	c, err := Dial(sock, "", WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The callers pass contexts without a deadline: the client's own must hold.
	ctx := context.Background()
	within(t, "Version", timeout, func() error { _, err := c.Version(ctx); return err })
	within(t, "PodContainers", timeout, func() error { _, err := c.PodContainers(ctx, "uid"); return err })
	within(t, "ContainerStatus", timeout, func() error { _, err := c.ContainerStatus(ctx, "id"); return err })
	within(t, "ContainerRecords", timeout, func() error { _, err := c.ContainerRecords(ctx, "uid"); return err })
	within(t, "TaskPID", timeout, func() error { _, err := c.TaskPID(ctx, "id"); return err })
	within(t, "UpdateCpuset", timeout, func() error { return c.UpdateCpuset(ctx, "id", "0", "0") })
	// StopContainer may take its own timeout (the grace period) on top of the client's.
	before := time.Now()
	within(t, "StopContainer", time.Second+timeout, func() error { return c.StopContainer(ctx, "id", time.Second) })
	// The deadline the runtime sees is the grace period plus the timeout from when the
	// call was made: no sooner than that after the call began, and no more than that
	// left when it arrived (gRPC sends what is left, which the way there only shortens).
	if d := <-h.stopCalled; d.at.Before(before.Add(time.Second+timeout)) || d.left > time.Second+timeout {
		t.Errorf("StopContainer reached the runtime with a deadline %v after the call began, %v left; want the grace period plus the timeout (%v)", d.at.Sub(before), d.left, time.Second+timeout)
	}
	// A caller's earlier deadline still wins.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	within(t, "Version with the caller's deadline", 50*time.Millisecond, func() error { _, err := c.Version(short); return err })
}

// A socket that accepts and never speaks HTTP/2: connecting is bounded too, for calls
// and for the exit stream.
func TestSilentSocketBoundsConnecting(t *testing.T) {
	sock := shortSocket(t)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix socket: %v", err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn // open, never answered
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, conn)
		}
	}()
	const timeout = 300 * time.Millisecond
	c, err := Dial("unix://"+sock, "", WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The call's deadline and the connection's handshake deadline are the same moment:
	// whichever gRPC notices first, the call ends then, as DeadlineExceeded or as
	// Unavailable for the connection it closed.
	withinEnding(t, "Version", timeout, func() error { _, err := c.Version(context.Background()); return err },
		codes.DeadlineExceeded, codes.Unavailable)

	start := time.Now()
	exits, errc := c.TaskEvents(context.Background())
	for range exits {
		t.Error("an exit from a socket that says nothing")
	}
	if err := <-errc; err == nil {
		t.Error("the exit stream of a silent socket ended without an error")
	}
	// Bounded, not timed: a minute past the deadline only says it was not waited out
	// forever, whatever the machine's load.
	if took := time.Since(start); took > timeout+time.Minute {
		t.Errorf("opening the exit stream of a silent socket failed after %v, want about %v", took, timeout)
	}
}

// The exit stream of a runtime that answers stays open past the timeout: it is meant
// to be quiet while nothing exits.
func TestExitStreamOutlivesTheTimeout(t *testing.T) {
	sock, _ := serveQuietEvents(t)
	const timeout = 200 * time.Millisecond
	c, err := Dial(sock, "", WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	exits, errc := c.TaskEvents(ctx)
	select {
	case err := <-errc:
		t.Fatalf("the exit stream ended within %v: %v", 5*timeout, err)
	case <-time.After(5 * timeout):
	}
	cancel()
	for range exits {
	}
	if err := <-errc; err != nil {
		t.Errorf("the exit stream ended with %v after its context did, want nil", err)
	}
}

type quietEvents struct {
	eventsapi.UnimplementedEventsServer
}

func (quietEvents) Subscribe(_ *eventsapi.SubscribeRequest, s eventsapi.Events_SubscribeServer) error {
	<-s.Context().Done()
	return nil
}

func serveQuietEvents(t *testing.T) (string, *grpc.Server) {
	t.Helper()
	sock := shortSocket(t)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix socket: %v", err)
	}
	srv := grpc.NewServer()
	eventsapi.RegisterEventsServer(srv, quietEvents{})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return sock, srv
}
