package cri

import (
	"context"
	"encoding/json"
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
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultEndpoint is containerd's usual socket.
const DefaultEndpoint = "unix:///run/containerd/containerd.sock"

// DefaultNamespace is the containerd namespace of the containers the CRI plugin makes.
const DefaultNamespace = "k8s.io"

// StopMarkLabel is the containerd label agents wrote their stop marks in before the
// marks moved to files in the agent's state directory; ContainerRecords still reads it,
// so that an upgraded agent knows what an older one stopped. containerd's CRI plugin
// also copies the image's labels into the container's, so an image can put a value
// here: its reader must tell an agent's marks (which name the container's ID) from
// others.
const StopMarkLabel = "sextant.io/sidecar-stop"

// The containerd events of a task's process having started, exited, and been deleted.
const (
	startTopic  = "/tasks/start"
	exitTopic   = "/tasks/exit"
	deleteTopic = "/tasks/delete"
)

// The label and extension containerd's CRI plugin puts on the containerd containers it
// makes: the kind ("container" or "sandbox"), and its own record of the container
// (versioned JSON).
const (
	criKindLabel      = "io.cri-containerd.kind"
	criKindContainer  = "container"
	criMetadataKey    = "io.cri-containerd.container.metadata"
	criMetadataFormat = "v1"
)

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

// ContainerRecords implements Runtime with containerd's own container list, a read of
// its metadata store: the CRI's ListContainers reads every container's state on the
// node, and waits for any of them whose exit the CRI is writing.
func (c *Client) ContainerRecords(ctx context.Context, podUID string) ([]Container, error) {
	resp, err := c.containers.List(c.namespaced(ctx), &containersapi.ListContainersRequest{
		Filters: []string{fmt.Sprintf(`labels.%q==%q,labels.%q==%q`, LabelPodUID, podUID, criKindLabel, criKindContainer)},
	})
	if err != nil {
		return nil, fmt.Errorf("list containerd containers of pod %s: %w", podUID, err)
	}
	out := make([]Container, 0, len(resp.Containers))
	for _, rc := range resp.Containers {
		ctr := Container{
			ID: rc.ID, PodUID: rc.Labels[LabelPodUID], Name: rc.Labels[LabelContainerName],
			State: StateUnknown, StopMark: rc.Labels[StopMarkLabel],
		}
		if rc.CreatedAt != nil {
			ctr.CreatedAt = rc.CreatedAt.AsTime()
		}
		if md, ok := rc.Extensions[criMetadataKey]; ok {
			if m, err := parseCRIMetadata(md.GetValue()); err == nil {
				ctr.Attempt, ctr.StopSignal = m.attempt, m.stopSignal
				if ctr.Name == "" {
					ctr.Name = m.name
				}
			}
		}
		out = append(out, ctr)
	}
	return out, nil
}

// criMetadata is what the agent reads of the CRI plugin's record of a container.
type criMetadata struct {
	name       string
	attempt    uint32
	stopSignal string // "SIGTERM" where the record names none: what the CRI then sends
}

// parseCRIMetadata reads the CRI plugin's JSON record of a container (its
// internal/cri/store/container Metadata, the same in containerd 1.6 to 2.x). A record of
// another version is an error: the fields may mean something else there.
func parseCRIMetadata(b []byte) (criMetadata, error) {
	var rec struct {
		Version  string
		Metadata struct {
			StopSignal string
			Config     *struct {
				Metadata *struct {
					Name    string `json:"name"`
					Attempt uint32 `json:"attempt"`
				} `json:"metadata"`
			}
		}
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return criMetadata{}, fmt.Errorf("cri metadata: %w", err)
	}
	if rec.Version != criMetadataFormat {
		return criMetadata{}, fmt.Errorf("cri metadata version %q: want %s", rec.Version, criMetadataFormat)
	}
	m := criMetadata{stopSignal: rec.Metadata.StopSignal}
	if m.stopSignal == "" {
		m.stopSignal = "SIGTERM"
	}
	if cfg := rec.Metadata.Config; cfg != nil && cfg.Metadata != nil {
		m.name, m.attempt = cfg.Metadata.Name, cfg.Metadata.Attempt
	}
	return m, nil
}

// ContainerStatus implements Runtime. The stop mark and the stop signal are not filled
// in: ContainerRecords does that.
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

// TaskPID implements Runtime with containerd's task service.
func (c *Client) TaskPID(ctx context.Context, id string) (uint32, error) {
	resp, err := c.tasks.Get(c.namespaced(ctx), &tasksapi.GetRequest{ContainerID: id})
	if err != nil {
		return 0, fmt.Errorf("task of container %s: %w", id, err)
	}
	if resp.Process == nil || resp.Process.Pid == 0 {
		return 0, fmt.Errorf("task of container %s: no process", id)
	}
	return resp.Process.Pid, nil
}

// TaskEvents implements Runtime with containerd's event service.
func (c *Client) TaskEvents(ctx context.Context) (<-chan TaskEvent, <-chan error) {
	out := make(chan TaskEvent, 64)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		errc <- c.streamTaskEvents(ctx, out)
	}()
	return out, errc
}

func (c *Client) streamTaskEvents(ctx context.Context, out chan<- TaskEvent) error {
	stream, err := c.events.Subscribe(ctx, &eventsapi.SubscribeRequest{
		Filters: []string{
			fmt.Sprintf(`topic==%q,namespace==%q`, startTopic, c.namespace),
			fmt.Sprintf(`topic==%q,namespace==%q`, exitTopic, c.namespace),
			fmt.Sprintf(`topic==%q,namespace==%q`, deleteTopic, c.namespace),
		},
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
		ev, ok := taskEvent(env)
		if !ok {
			continue // not ours to fail on; the resync catches what this misses
		}
		select {
		case out <- ev:
		case <-ctx.Done():
			return nil
		}
	}
}

// taskEvent reads a start, exit or deletion of a container's main process from env.
func taskEvent(env *eventsapi.Envelope) (TaskEvent, bool) {
	if env.Event == nil {
		return TaskEvent{}, false
	}
	switch {
	case strings.HasSuffix(env.Event.TypeUrl, "containerd.events.TaskStart"):
		var ev apievents.TaskStart
		if err := proto.Unmarshal(env.Event.Value, &ev); err != nil || ev.ContainerID == "" {
			return TaskEvent{}, false
		}
		return TaskEvent{ContainerID: ev.ContainerID, Started: true, Pid: ev.Pid}, true
	case strings.HasSuffix(env.Event.TypeUrl, "containerd.events.TaskExit"):
		var ev apievents.TaskExit
		if err := proto.Unmarshal(env.Event.Value, &ev); err != nil || ev.ContainerID == "" {
			return TaskEvent{}, false
		}
		// An exec'd process exiting has its own ID; only the container's own process
		// ends the container.
		if ev.ID != "" && ev.ID != ev.ContainerID {
			return TaskEvent{}, false
		}
		out := TaskEvent{ContainerID: ev.ContainerID, ExitCode: ev.ExitStatus}
		if ev.ExitedAt != nil {
			out.ExitedAt = ev.ExitedAt.AsTime()
		}
		return out, true
	case strings.HasSuffix(env.Event.TypeUrl, "containerd.events.TaskDelete"):
		var ev apievents.TaskDelete
		if err := proto.Unmarshal(env.Event.Value, &ev); err != nil || ev.ContainerID == "" {
			return TaskEvent{}, false
		}
		if ev.ID != "" && ev.ID != ev.ContainerID {
			return TaskEvent{}, false
		}
		return TaskEvent{ContainerID: ev.ContainerID, Deleted: true, ExitCode: ev.ExitStatus}, true
	}
	return TaskEvent{}, false
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
