package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"sextant.io/sextant/api/v1alpha1"
)

// endpoint serves one resource, sextant.io/<kind>, on its own socket. It outlives its
// gRPC server: the Manager replaces the server when the kubelet wipes the socket, and
// the device set and the kubelet's streams carry on.
type endpoint struct {
	pluginapi.UnimplementedDevicePluginServer

	kind     v1alpha1.DeviceKind
	resource string
	socket   string
	m        *Manager

	mu      sync.Mutex
	devs    []*pluginapi.Device
	numa    map[string]int64
	changed chan struct{} // closed and replaced on every change of devs

	// Owned by the Manager's Run loop.
	server       *grpc.Server
	needRegister bool
	kubeletID    fileID // the kubelet socket registered with
	backoff      time.Duration
	nextTry      time.Time
}

func newEndpoint(m *Manager, kind v1alpha1.DeviceKind, socket string) *endpoint {
	return &endpoint{
		kind: kind, resource: string(kind.ResourceName()), socket: socket, m: m,
		numa: map[string]int64{}, changed: make(chan struct{}), needRegister: true,
	}
}

// set replaces the device list and wakes every ListAndWatch stream if it changed.
func (e *endpoint) set(devs []*pluginapi.Device) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if sameDevices(e.devs, devs) {
		return
	}
	e.devs = devs
	e.numa = map[string]int64{}
	for _, d := range devs {
		if d.Topology != nil && len(d.Topology.Nodes) == 1 {
			e.numa[d.ID] = d.Topology.Nodes[0].ID
		}
	}
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *endpoint) snapshot() ([]*pluginapi.Device, chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.devs, e.changed
}

func (e *endpoint) has(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.devs, func(d *pluginapi.Device) bool { return d.ID == id })
}

func (e *endpoint) numaNodes() map[string]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.numa
}

func sameDevices(a, b []*pluginapi.Device) bool {
	return slices.EqualFunc(a, b, func(x, y *pluginapi.Device) bool {
		return x.ID == y.ID && x.Health == y.Health && numaOf(x) == numaOf(y)
	})
}

func numaOf(d *pluginapi.Device) int64 {
	if d.Topology == nil || len(d.Topology.Nodes) != 1 {
		return -1
	}
	return d.Topology.Nodes[0].ID
}

// serve starts a gRPC server on the socket, replacing a stale socket file (a previous
// agent's) and any server this endpoint ran before.
func (e *endpoint) serve() error {
	e.stop()
	if err := os.Remove(e.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", e.socket, err)
	}
	l, err := net.Listen("unix", e.socket)
	if err != nil {
		return fmt.Errorf("serve %s on %s: %w", e.resource, e.socket, err)
	}
	srv := grpc.NewServer(e.m.cfg.Limits.serverOptions()...)
	pluginapi.RegisterDevicePluginServer(srv, e)
	go func() { _ = srv.Serve(l) }()
	e.server = srv
	return nil
}

// stop stops the server, which ends the kubelet's streams.
func (e *endpoint) stop() {
	if e.server != nil {
		e.server.Stop()
		e.server = nil
	}
}

// GetDevicePluginOptions tells the kubelet to ask for preferred allocations: that is
// where the ranker's choice gets in.
func (e *endpoint) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the device list now and again on every change, until the kubelet
// goes or the server stops.
func (e *endpoint) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		devs, changed := e.snapshot()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation offers, for each container, the devices the ranker chose for
// the pod being admitted (see Prefer).
func (e *endpoint) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		p := e.m.prefer(ctx, e, PreferenceRequest{
			Resource:    e.kind.ResourceName(),
			Available:   cr.GetAvailableDeviceIDs(),
			MustInclude: cr.GetMustIncludeDeviceIDs(),
			Size:        int(cr.GetAllocationSize()),
		})
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: p.IDs})
	}
	return resp, nil
}

// Allocate hands each container its devices: the environment, the device nodes, the
// CDI devices. Devices the ranker did not choose for the pod are refused (check): the
// kubelet then fails the pod's admission, and its controller makes a new one for the
// ranker to place again.
func (e *endpoint) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		for _, id := range cr.GetDevicesIds() {
			if !e.has(id) {
				return nil, status.Errorf(codes.InvalidArgument, "device %s is not a %s device of this node", id, e.resource)
			}
		}
		if mismatch := e.m.check(ctx, e, cr.GetDevicesIds()); mismatch != nil {
			return nil, status.Error(codes.FailedPrecondition, mismatch.Error())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, e.m.containerResponse(e.kind, cr.GetDevicesIds()))
	}
	if e.m.cfg.OnAllocated != nil {
		e.m.cfg.OnAllocated(e.resource)
	}
	return resp, nil
}
