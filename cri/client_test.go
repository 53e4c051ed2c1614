package cri

import (
	"errors"
	"fmt"
	"testing"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
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

func TestParseCRIMetadata(t *testing.T) {
	// As containerd's CRI plugin writes it (1.6 to 2.x): Go field names, and the CRI's
	// ContainerConfig with its JSON tags.
	const rec = `{"Version":"v1","Metadata":{"ID":"abc","Name":"proxy_job_ns_uid_1","SandboxID":"s",` +
		`"Config":{"metadata":{"name":"proxy","attempt":1},"image":{"image":"x"},"labels":{"io.kubernetes.container.name":"proxy"}},` +
		`"ImageRef":"sha256:1","LogPath":"/l","StopSignal":"SIGQUIT","ProcessLabel":""}}`
	m, err := parseCRIMetadata([]byte(rec))
	if err != nil || m != (criMetadata{name: "proxy", attempt: 1, stopSignal: "SIGQUIT"}) {
		t.Errorf("parseCRIMetadata = %+v, %v; want proxy, attempt 1, SIGQUIT", m, err)
	}
	// No stop signal recorded: the CRI sends SIGTERM.
	m, err = parseCRIMetadata([]byte(`{"Version":"v1","Metadata":{"Config":{"metadata":{"name":"main"}}}}`))
	if err != nil || m != (criMetadata{name: "main", stopSignal: "SIGTERM"}) {
		t.Errorf("parseCRIMetadata without a stop signal = %+v, %v; want main, SIGTERM", m, err)
	}
	for _, bad := range []string{``, `{`, `{"Version":"v2","Metadata":{"StopSignal":"SIGKILL"}}`, `{"Metadata":{}}`, `[]`} {
		if m, err := parseCRIMetadata([]byte(bad)); err == nil {
			t.Errorf("parseCRIMetadata(%q) = %+v, want an error", bad, m)
		}
	}
}

func TestTaskEvent(t *testing.T) {
	at := time.Unix(1_763_805_600, 5)
	envelope := func(m proto.Message) *eventsapi.Envelope {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		return &eventsapi.Envelope{Event: a}
	}
	cases := []struct {
		name string
		env  *eventsapi.Envelope
		want TaskEvent
		ok   bool
	}{
		{"start", envelope(&apievents.TaskStart{ContainerID: "c", Pid: 42}), TaskEvent{ContainerID: "c", Started: true, Pid: 42}, true},
		{"exit", envelope(&apievents.TaskExit{ContainerID: "c", ID: "c", ExitStatus: 143, ExitedAt: timestamppb.New(at)}), TaskEvent{ContainerID: "c", ExitCode: 143, ExitedAt: at}, true},
		{"exit without the process ID", envelope(&apievents.TaskExit{ContainerID: "c", ExitStatus: 1}), TaskEvent{ContainerID: "c", ExitCode: 1}, true},
		{"delete", envelope(&apievents.TaskDelete{ContainerID: "c", ID: "c", ExitStatus: 143}), TaskEvent{ContainerID: "c", Deleted: true, ExitCode: 143}, true},
		{"an exec'd process's delete", envelope(&apievents.TaskDelete{ContainerID: "c", ID: "exec-1"}), TaskEvent{}, false},
		{"an exec'd process's exit", envelope(&apievents.TaskExit{ContainerID: "c", ID: "exec-1", ExitStatus: 0}), TaskEvent{}, false},
		{"another event", envelope(&apievents.TaskOOM{ContainerID: "c"}), TaskEvent{}, false},
		{"no event", &eventsapi.Envelope{}, TaskEvent{}, false},
		{"no container", envelope(&apievents.TaskStart{Pid: 42}), TaskEvent{}, false},
	}
	for _, c := range cases {
		got, ok := taskEvent(c.env)
		if ok != c.ok || !got.ExitedAt.Equal(c.want.ExitedAt) || got.ContainerID != c.want.ContainerID || got.Started != c.want.Started || got.Deleted != c.want.Deleted || got.Pid != c.want.Pid || got.ExitCode != c.want.ExitCode {
			t.Errorf("%s: taskEvent = %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
