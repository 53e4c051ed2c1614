package cri

import (
	"context"
	"syscall"
	"time"
)

// The labels the kubelet puts on every container it creates through the CRI.
const (
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelContainerName = "io.kubernetes.container.name"
)

// State is a container's state as the runtime reports it.
type State string

const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited"
	StateUnknown State = "unknown"
)

// Container is one container (one attempt of a pod's container) as the runtime sees it.
type Container struct {
	ID     string
	PodUID string
	// Name is the container's name in the pod spec.
	Name string
	// Attempt counts the kubelet's restarts of this container of the pod.
	Attempt   uint32
	State     State
	CreatedAt time.Time
	// StartedAt and FinishedAt are zero until the container started or finished.
	StartedAt  time.Time
	FinishedAt time.Time
	// ExitCode is meaningful only in StateExited.
	ExitCode int32
	// StopMark is the container's StopMarkLabel: what MarkStop last recorded on it, or
	// what its image's labels put there; empty if nothing.
	StopMark string
}

// Exit is a container's main process having exited.
type Exit struct {
	ContainerID string
	ExitCode    uint32
	ExitedAt    time.Time
}

// Runtime is what the sidecar terminator needs from the node's container runtime.
type Runtime interface {
	// PodContainers returns every container the runtime holds for the pod, each attempt
	// of each container, exited ones included.
	PodContainers(ctx context.Context, podUID string) ([]Container, error)
	// ContainerStatus returns one container; an error satisfying IsNotFound if the
	// runtime has no such container.
	ContainerStatus(ctx context.Context, id string) (Container, error)
	// StopContainer asks the container to stop: SIGTERM (or the image's stop signal),
	// then SIGKILL once timeout has passed. It returns once the container exited.
	StopContainer(ctx context.Context, id string, timeout time.Duration) error
	// Signal sends sig to the container's main process, and nothing more.
	Signal(ctx context.Context, id string, sig syscall.Signal) error
	// MarkStop records mark on the container itself, where it outlives the caller: a
	// restarted agent reads it back as Container.StopMark (which the image can also set).
	MarkStop(ctx context.Context, id, mark string) error
	// Exits streams the exits of containers' main processes until ctx ends or the
	// stream breaks; the error channel then receives why (nil when ctx ended).
	Exits(ctx context.Context) (<-chan Exit, <-chan error)
}
