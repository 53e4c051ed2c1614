package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	"google.golang.org/grpc"
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
// object, so it survives the agent and vanishes with the container.
const StopMarkLabel = "sextant.io/sidecar-stop"

// exitTopic is containerd's event for a task's process having exited.
const exitTopic = "/tasks/exit"

// Client talks to containerd over one socket: CRI for the containers, containerd's own
// API for exit events and stop marks.
type Client struct {
	conn       *grpc.ClientConn
	runtime    runtimeapi.RuntimeServiceClient
	containers containersapi.ContainersClient
	events     eventsapi.EventsClient
	namespace  string
}

// Dial connects to the runtime at endpoint (unix:///path or a plain path). The
// connection is lazy: a runtime that is not up yet fails the first call, not Dial.
func Dial(endpoint, namespace string) (*Client, error) {
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	if namespace == "" {
		namespace = DefaultNamespace
	}
	target := endpoint
	if !strings.Contains(target, "://") {
		target = "unix://" + target
	}
	if !strings.HasPrefix(target, "unix://") {
		return nil, fmt.Errorf("cri endpoint %q: only unix sockets are supported (unix:///path)", endpoint)
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("cri endpoint %s: %w", endpoint, err)
	}
	return &Client{
		conn:       conn,
		runtime:    runtimeapi.NewRuntimeServiceClient(conn),
		containers: containersapi.NewContainersClient(conn),
		events:     eventsapi.NewEventsClient(conn),
		namespace:  namespace,
	}, nil
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
	_, err := c.runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: secs})
	if err != nil {
		return fmt.Errorf("stop container %s (timeout %ds): %w", id, secs, err)
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
