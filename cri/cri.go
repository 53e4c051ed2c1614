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
	// StopMark is the container's StopMarkLabel: what an agent before stop marks were
	// files wrote on it, or what its image's labels put there; empty if nothing. Only
	// ContainerRecords fills it in.
	StopMark string
	// StopSignal is the signal containerd's CRI stops the container with (such as
	// "SIGTERM" or "SIGQUIT"), as its CRI metadata records it; empty if unknown. Only
	// ContainerRecords fills it in.
	StopSignal string
}

// TaskEvent is a container's main process having started, exited, or been deleted.
type TaskEvent struct {
	ContainerID string
	// Started is true for a start. Deleted is true for the deletion of an exited task,
	// which containerd's CRI does as it records the container's exit: the CRI reports
	// the container exited soon after. Both false: an exit.
	Started bool
	Deleted bool
	// Pid is the started process's ID in containerd's (the host's) PID namespace.
	Pid uint32
	// ExitCode and ExitedAt are an exit's.
	ExitCode uint32
	ExitedAt time.Time
}

// Runtime is what the sidecar terminator needs from the node's container runtime.
type Runtime interface {
	// ContainerRecords returns every container the runtime holds for the pod (each
	// attempt of each container, exited ones included) as its metadata store records
	// them: ID, name, attempt, creation time, stop mark and stop signal, but State
	// StateUnknown. It does not wait on the containers' states, which the CRI guards
	// with a lock per container that an exit being written holds.
	ContainerRecords(ctx context.Context, podUID string) ([]Container, error)
	// ContainerStatus returns one container; an error satisfying IsNotFound if the
	// runtime has no such container.
	ContainerStatus(ctx context.Context, id string) (Container, error)
	// StopContainer asks the container to stop: SIGTERM (or the image's stop signal),
	// then SIGKILL once timeout has passed. It returns once the container exited.
	StopContainer(ctx context.Context, id string, timeout time.Duration) error
	// Signal sends sig to the container's main process, and nothing more.
	Signal(ctx context.Context, id string, sig syscall.Signal) error
	// TaskPID returns the host PID of the container's main process.
	TaskPID(ctx context.Context, id string) (uint32, error)
	// TaskEvents streams the starts, exits and deletions of containers' main processes until ctx
	// ends or the stream breaks; the error channel then receives why (nil when ctx
	// ended).
	TaskEvents(ctx context.Context) (<-chan TaskEvent, <-chan error)
}
