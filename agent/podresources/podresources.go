// Package podresources is a client of the kubelet's PodResources API: what the kubelet
// itself assigned to the containers of its node (exclusive CPUs, devices). The agent
// reads it as ground truth beside the ranker's decisions.
package podresources

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the API under its default root directory.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Client talks to one kubelet's PodResources socket.
type Client struct {
	conn    *grpc.ClientConn
	api     podresourcesapi.PodResourcesListerClient
	timeout time.Duration
}

// DefaultTimeout bounds each call: a kubelet that accepts the connection and never
// answers fails the call, and the caller's loop retries, instead of waiting forever.
const DefaultTimeout = 10 * time.Second

// Option changes how Dial connects.
type Option func(*Client)

// WithTimeout sets the bound on each call (default DefaultTimeout).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// Dial connects to the socket (a path or unix:///path). The connection is lazy: a kubelet
// that is not up yet fails the first call, not Dial.
func Dial(socket string, opts ...Option) (*Client, error) {
	if socket == "" {
		socket = DefaultSocket
	}
	target := socket
	if !strings.HasPrefix(target, "unix://") {
		target = "unix://" + target
	}
	c := &Client{timeout: DefaultTimeout}
	for _, o := range opts {
		o(c)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)),
		grpc.WithChainUnaryInterceptor(c.deadline))
	if err != nil {
		return nil, fmt.Errorf("pod resources socket %s: %w", socket, err)
	}
	c.conn, c.api = conn, podresourcesapi.NewPodResourcesListerClient(conn)
	return c, nil
}

// deadline bounds every call by the client's timeout; a caller's earlier deadline wins.
func (c *Client) deadline(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// StaticManagers reports whether the kubelet runs the static CPU manager policy and
// the Static memory manager policy, the two that set containers' cpusets themselves.
// Only those policies have CPUs, or memory per NUMA node, to allocate exclusively, and
// the kubelet lists them as allocatable; under the none policies the lists are empty.
func (c *Client) StaticManagers(ctx context.Context) (cpu, memory bool, err error) {
	resp, err := c.api.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return false, false, fmt.Errorf("ask the kubelet for its allocatable resources: %w", err)
	}
	return len(resp.GetCpuIds()) > 0, len(resp.GetMemory()) > 0, nil
}

// List returns what the kubelet assigned to every container of its node's pods.
func (c *Client) List(ctx context.Context) ([]*podresourcesapi.PodResources, error) {
	resp, err := c.api.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("ask the kubelet for its pods' resources: %w", err)
	}
	return resp.GetPodResources(), nil
}

// DeviceResources returns the resource names the kubelet's device manager serves
// devices of (those of registered device plugins).
func (c *Client) DeviceResources(ctx context.Context) (map[string]bool, error) {
	devs, err := c.AllocatableDevices(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(devs))
	for name := range devs {
		out[name] = true
	}
	return out, nil
}

// AllocatableDevices returns, by resource name, the IDs of the devices the kubelet's
// device manager can allocate: those its registered plugins list as healthy.
func (c *Client) AllocatableDevices(ctx context.Context) (map[string][]string, error) {
	resp, err := c.api.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("ask the kubelet for its allocatable resources: %w", err)
	}
	out := map[string][]string{}
	for _, d := range resp.GetDevices() {
		out[d.GetResourceName()] = append(out[d.GetResourceName()], d.GetDeviceIds()...)
	}
	return out, nil
}
