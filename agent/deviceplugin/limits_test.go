package deviceplugin

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"sextant.io/sextant/api/v1alpha1"
)

// patience is how long a test waits for what must come about: far longer than the
// limits it sets, so a busy machine does not fail it.
const patience = 30 * time.Second

// boundedEndpoint serves an endpoint with limits on a socket of its own until the test
// ends, and returns the socket's path.
func boundedEndpoint(t *testing.T, limits ServerLimits) string {
	t.Helper()
	m := &Manager{cfg: Config{Limits: limits.withDefaults()}}
	socket := filepath.Join(t.TempDir(), "sextant-gpu.sock")
	e := newEndpoint(m, v1alpha1.DeviceKind("gpu"), socket)
	if err := e.serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.stop)
	return socket
}

func dialEndpoint(t *testing.T, socket string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// A request over MaxRecvMsgSize is refused before it reaches the plugin.
func TestEndpointRefusesLargeRequests(t *testing.T) {
	c := dialEndpoint(t, boundedEndpoint(t, ServerLimits{MaxRecvMsgSize: 64 << 10}))
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	ids := make([]string, 20000) // about 280 KiB
	for i := range ids {
		ids[i] = "0000:00:00.0"
	}
	_, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Allocate of 280 KiB with a limit of 64 KiB: %v, want ResourceExhausted", err)
	}
	// Within the limit, the plugin answers (here: no such device).
	_, err = c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids[:1]}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Allocate of one unknown device: %v, want InvalidArgument", err)
	}
}

// Beyond MaxInFlightStreams open ListAndWatch streams, the next is refused.
func TestEndpointBoundsStreamsInFlight(t *testing.T) {
	c := dialEndpoint(t, boundedEndpoint(t, ServerLimits{MaxInFlightStreams: 2}))
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for i := range 2 {
		s, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		// The first list arrives once the stream is being served.
		if _, err := s.Recv(); err != nil {
			t.Fatalf("stream %d of 2: %v", i+1, err)
		}
	}
	s, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a third stream with 2 open: %v, want ResourceExhausted", err)
	}
}

// A client that connects and never speaks is dropped after ConnectionTimeout.
func TestEndpointDropsSilentConnections(t *testing.T) {
	socket := boundedEndpoint(t, ServerLimits{ConnectionTimeout: 200 * time.Millisecond})
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	got, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a silent client was still connected after %v (read %d bytes)", patience, len(got))
	}
}

func TestServerLimitsDefaults(t *testing.T) {
	l := ServerLimits{MaxRecvMsgSize: 5}.withDefaults()
	if l.MaxRecvMsgSize != 5 || l.MaxInFlightCalls != DefaultServerLimits.MaxInFlightCalls || l.ConnectionTimeout != DefaultServerLimits.ConnectionTimeout {
		t.Errorf("withDefaults = %+v: want the field set kept and the others DefaultServerLimits'", l)
	}
}
