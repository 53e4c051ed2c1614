package cri

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestIsNotFound(t *testing.T) {
	nf := status.Error(codes.NotFound, "an error occurred when try to find container")
	cases := map[string]struct {
		err  error
		want bool
	}{
		"nil":            {nil, false},
		"not found":      {nf, true},
		"wrapped":        {fmt.Errorf("status of container x: %w", nf), true},
		"other code":     {status.Error(codes.Unavailable, "connection refused"), false},
		"plain error":    {errors.New("not found"), false},
		"wrapped, other": {fmt.Errorf("x: %w", status.Error(codes.Internal, "boom")), false},
	}
	for name, c := range cases {
		if got := IsNotFound(c.err); got != c.want {
			t.Errorf("%s: IsNotFound = %v, want %v", name, got, c.want)
		}
	}
}

func TestState(t *testing.T) {
	for in, want := range map[runtimeapi.ContainerState]State{
		runtimeapi.ContainerState_CONTAINER_CREATED: StateCreated,
		runtimeapi.ContainerState_CONTAINER_RUNNING: StateRunning,
		runtimeapi.ContainerState_CONTAINER_EXITED:  StateExited,
		runtimeapi.ContainerState_CONTAINER_UNKNOWN: StateUnknown,
	} {
		if got := state(in); got != want {
			t.Errorf("state(%v) = %s, want %s", in, got, want)
		}
	}
	if !nanos(0).IsZero() || !nanos(-1).IsZero() {
		t.Error("an unset CRI time is not the zero time")
	}
	if got := nanos(1_763_805_600_123_456_789); !got.Equal(time.Unix(1_763_805_600, 123_456_789)) {
		t.Errorf("nanos = %v", got)
	}
}

func TestDialEndpoints(t *testing.T) {
	for _, ok := range []string{"", "/run/containerd/containerd.sock", "unix:///run/containerd/containerd.sock"} {
		c, err := Dial(ok, "")
		if err != nil {
			t.Errorf("Dial(%q): %v", ok, err)
			continue
		}
		_ = c.Close()
	}
	if _, err := Dial("tcp://10.0.0.1:1234", ""); err == nil {
		t.Error("Dial of a TCP endpoint: no error")
	}
}
