package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultEndpoint is containerd's usual socket.
const DefaultEndpoint = "unix:///run/containerd/containerd.sock"

// DefaultNamespace is the containerd namespace of the containers the CRI plugin makes.
const DefaultNamespace = "k8s.io"

// StopMarkLabel is the containerd label MarkStop writes. It lives on the container
// object, so it survives the agent and vanishes with the container. containerd's CRI
// plugin also copies the image's labels into the container's, so an image can put a
// value here before MarkStop ever runs: its reader must tell its own marks (the agent's
// name the container's ID).
const StopMarkLabel = "sextant.io/sidecar-stop"

// exitTopic is containerd's event for a task's process having exited.
const exitTopic = "/tasks/exit"

// DefaultTimeout bounds every call to the runtime unless Dial is told otherwise. A
// containerd that is wedged (a stuck shim, a full disk under its metadata store) must
// not wedge the agent's loops with it: a call that does not answer in time fails, the
// loop logs it and tries again later, and /healthz sees the loop still turning.
const DefaultTimeout = 10 * time.Second

// reconnectBackoff paces the connection's attempts to reach the socket again once it
// broke (containerd restarted): the kubelet's own CRI client's, 100ms growing to 3s.
// gRPC's default grows to 2 minutes, and a restart that took a while (an upgrade)
// would leave the agent waiting that long after containerd was back: redialling a
// local socket costs next to nothing.
var reconnectBackoff = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second}

// Client talks to containerd over one socket: CRI for the containers, containerd's own
// API for exit events and stop marks.
type Client struct {
	conn       *grpc.ClientConn
	runtime    runtimeapi.RuntimeServiceClient
	containers containersapi.ContainersClient
	events     eventsapi.EventsClient
	tasks      tasksapi.TasksClient
	namespace  string
	timeout    time.Duration
}

// An Option changes how Dial connects.
type Option func(*Client)

// WithTimeout bounds each call (and each attempt to connect) to d instead of
// DefaultTimeout; d <= 0 keeps the default.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// Dial connects to the runtime at endpoint (unix:///path or a plain path). The
// connection is lazy: a runtime that is not up yet fails the first call, not Dial.
// Every unary call gets a deadline of the client's timeout (StopContainer: its own
// timeout on top), unless the caller's context ends sooner; connecting, the socket
// and the HTTP/2 handshake together, gets the same bound.
func Dial(endpoint, namespace string, opts ...Option) (*Client, error) {
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	if namespace == "" {
		namespace = DefaultNamespace
	}
	path, ok := SocketPath(endpoint)
	if !ok {
		return nil, fmt.Errorf("cri endpoint %q: only unix sockets are supported (unix:///path)", endpoint)
	}
	target := "unix://" + path
	c := &Client{namespace: namespace, timeout: DefaultTimeout}
	for _, o := range opts {
		o(c)
	}
	dialer := &net.Dialer{Timeout: c.timeout}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", strings.TrimPrefix(addr, "unix://"))
		}),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff, MinConnectTimeout: c.timeout}),
		grpc.WithChainUnaryInterceptor(c.unaryDeadline),
		grpc.WithChainStreamInterceptor(c.streamDeadline))
	if err != nil {
		return nil, fmt.Errorf("cri endpoint %s: %w", endpoint, err)
	}
	c.conn = conn
	c.runtime = runtimeapi.NewRuntimeServiceClient(conn)
	c.containers = containersapi.NewContainersClient(conn)
	c.events = eventsapi.NewEventsClient(conn)
	c.tasks = tasksapi.NewTasksClient(conn)
	return c, nil
}

// SocketPath is the path of the unix socket endpoint names (unix:///path or a plain
// path); ok is false for an empty one and any other kind, which Dial refuses.
func SocketPath(endpoint string) (path string, ok bool) {
	if !strings.Contains(endpoint, "://") {
		return endpoint, endpoint != ""
	}
	path, ok = strings.CutPrefix(endpoint, "unix://")
	return path, ok && path != ""
}

// Timeout is the bound on each call.
func (c *Client) Timeout() time.Duration { return c.timeout }

// extraTime is a context key: how much longer than the client's timeout one call may
// legitimately take (StopContainer waits out the grace period it passes).
type extraTime struct{}

func withExtraTime(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, extraTime{}, d)
}

// unaryDeadline puts the client's deadline on every unary call: the one place every
// method of every service goes through, so a method added later cannot forget it.
func (c *Client) unaryDeadline(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	d := c.timeout
	if extra, ok := ctx.Value(extraTime{}).(time.Duration); ok && extra > 0 {
		d += extra
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// streamDeadline bounds opening a stream, not its life: the exit stream is meant to
// stay open and quiet for as long as nothing exits. A stream that opened and then
// hangs is the terminator's resync's to cover.
func (c *Client) streamDeadline(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(c.timeout, cancel)
	s, err := streamer(ctx, desc, cc, method, opts...)
	if !timer.Stop() {
		cancel()
		if err == nil {
			err = status.Errorf(codes.DeadlineExceeded, "opening %s took longer than %s", method, c.timeout)
		}
		return nil, err
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &cancelOnEnd{ClientStream: s, cancel: cancel}, nil
}

// cancelOnEnd releases the stream's context once the stream has ended.
type cancelOnEnd struct {
	grpc.ClientStream
	cancel context.CancelFunc
}

func (s *cancelOnEnd) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.cancel()
	}
	return err
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Version asks the runtime for its name and version: a cheap check that the socket
// answers and speaks CRI v1.
func (c *Client) Version(ctx context.Context) (string, error) {
	v, err := c.runtime.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return "", fmt.Errorf("cri version: %w", err)
	}
	return v.RuntimeName + " " + v.RuntimeVersion, nil
}

// namespaced adds the containerd namespace that containerd's own API calls need.
func (c *Client) namespaced(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "containerd-namespace", c.namespace)
}

// PodContainers implements Runtime.
func (c *Client) PodContainers(ctx context.Context, podUID string) ([]Container, error) {
	list, err := c.runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{LabelPodUID: podUID}},
	})
	if err != nil {
		return nil, fmt.Errorf("list containers of pod %s: %w", podUID, err)
	}
	marks, err := c.stopMarks(ctx, podUID)
	if err != nil {
		return nil, err
	}
	out := make([]Container, 0, len(list.Containers))
	for _, lc := range list.Containers {
		ctr := Container{
			ID: lc.Id, PodUID: lc.Labels[LabelPodUID], Name: lc.Labels[LabelContainerName],
			State: state(lc.State), CreatedAt: nanos(lc.CreatedAt), StopMark: marks[lc.Id],
		}
		if lc.Metadata != nil {
			ctr.Attempt = lc.Metadata.Attempt
			if ctr.Name == "" {
				ctr.Name = lc.Metadata.Name
			}
		}
		// The list has no exit code or times: ask for them where they matter.
		if ctr.State == StateExited {
			st, err := c.ContainerStatus(ctx, lc.Id)
			if IsNotFound(err) {
				continue // removed between the list and now
			}
			if err != nil {
				return nil, err
			}
			st.StopMark = ctr.StopMark
			ctr = st
		}
		out = append(out, ctr)
	}
	return out, nil
}

// stopMarks reads StopMarkLabel of every containerd container of the pod.
func (c *Client) stopMarks(ctx context.Context, podUID string) (map[string]string, error) {
	resp, err := c.containers.List(c.namespaced(ctx), &containersapi.ListContainersRequest{
		Filters: []string{fmt.Sprintf(`labels.%q==%q`, LabelPodUID, podUID)},
	})
	if err != nil {
		return nil, fmt.Errorf("list containerd containers of pod %s: %w", podUID, err)
	}
	marks := map[string]string{}
	for _, ctr := range resp.Containers {
		if m := ctr.Labels[StopMarkLabel]; m != "" {
			marks[ctr.ID] = m
		}
	}
	return marks, nil
}

// ContainerStatus implements Runtime. The stop mark is not filled in: PodContainers
// does that.
func (c *Client) ContainerStatus(ctx context.Context, id string) (Container, error) {
	resp, err := c.runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return Container{}, fmt.Errorf("status of container %s: %w", id, err)
	}
	s := resp.Status
	if s == nil {
		return Container{}, fmt.Errorf("status of container %s: empty answer", id)
	}
	ctr := Container{
		ID: s.Id, PodUID: s.Labels[LabelPodUID], Name: s.Labels[LabelContainerName],
		State: state(s.State), CreatedAt: nanos(s.CreatedAt), StartedAt: nanos(s.StartedAt),
		FinishedAt: nanos(s.FinishedAt), ExitCode: s.ExitCode,
	}
	if s.Metadata != nil {
		ctr.Attempt = s.Metadata.Attempt
		if ctr.Name == "" {
			ctr.Name = s.Metadata.Name
		}
	}
	return ctr, nil
}

// StopContainer implements Runtime.
func (c *Client) StopContainer(ctx context.Context, id string, timeout time.Duration) error {
	secs := int64((timeout + time.Second - 1) / time.Second) // CRI counts whole seconds; round up
	// The runtime answers once the container is gone: after up to secs of grace, then
	// the kill.
	ctx = withExtraTime(ctx, time.Duration(secs)*time.Second)
	_, err := c.runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: secs})
	if err != nil {
		return fmt.Errorf("stop container %s (timeout %ds): %w", id, secs, err)
	}
	return nil
}

// Signal implements Runtime with containerd's task service: CRI has no call that only
// signals.
func (c *Client) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	if _, err := c.tasks.Kill(c.namespaced(ctx), &tasksapi.KillRequest{ContainerID: id, Signal: uint32(sig)}); err != nil {
		return fmt.Errorf("signal container %s (%s): %w", id, sig, err)
	}
	return nil
}

// MarkStop implements Runtime.
func (c *Client) MarkStop(ctx context.Context, id, mark string) error {
	_, err := c.containers.Update(c.namespaced(ctx), &containersapi.UpdateContainerRequest{
		Container:  &containersapi.Container{ID: id, Labels: map[string]string{StopMarkLabel: mark}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels." + StopMarkLabel}},
	})
	if err != nil {
		return fmt.Errorf("mark container %s: %w", id, err)
	}
	return nil
}

// Exits implements Runtime with containerd's event service.
func (c *Client) Exits(ctx context.Context) (<-chan Exit, <-chan error) {
	out := make(chan Exit, 64)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		errc <- c.streamExits(ctx, out)
	}()
	return out, errc
}

func (c *Client) streamExits(ctx context.Context, out chan<- Exit) error {
	stream, err := c.events.Subscribe(ctx, &eventsapi.SubscribeRequest{
		Filters: []string{fmt.Sprintf(`topic==%q,namespace==%q`, exitTopic, c.namespace)},
	})
	if err != nil {
		return fmt.Errorf("subscribe to containerd events: %w", err)
	}
	for {
		env, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return errors.New("containerd closed the event stream")
			}
			return fmt.Errorf("containerd event stream: %w", err)
		}
		if env.Event == nil || !strings.HasSuffix(env.Event.TypeUrl, "containerd.events.TaskExit") {
			continue
		}
		var ev apievents.TaskExit
		if err := proto.Unmarshal(env.Event.Value, &ev); err != nil {
			continue // not ours to fail on; the resync catches what this misses
		}
		// An exec'd process exiting has its own ID; only the container's own process
		// ends the container.
		if ev.ID != "" && ev.ID != ev.ContainerID {
			continue
		}
		exit := Exit{ContainerID: ev.ContainerID, ExitCode: ev.ExitStatus}
		if ev.ExitedAt != nil {
			exit.ExitedAt = ev.ExitedAt.AsTime()
		}
		select {
		case out <- exit:
		case <-ctx.Done():
			return nil
		}
	}
}

// IsNotFound reports whether err says the runtime has no such container.
func IsNotFound(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if s, ok := status.FromError(err); ok && s.Code() == codes.NotFound {
			return true
		}
	}
	return false
}

func state(s runtimeapi.ContainerState) State {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return StateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return StateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return StateExited
	}
	return StateUnknown
}

func nanos(ns int64) time.Time {
	if ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
