package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"sextant.io/sextant/api/v1alpha1"
)

// fakeKubelet is the kubelet's side of the device-plugin API over a real unix socket:
// Register dials the plugin back, asks its options and follows ListAndWatch, as the
// kubelet's device manager does.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir string
	srv *grpc.Server

	mu            sync.Mutex
	registrations []*pluginapi.RegisterRequest
	lists         map[string][][]*pluginapi.Device
	clients       map[string]pluginapi.DevicePluginClient
	conns         []*grpc.ClientConn
}

func startKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{dir: dir, lists: map[string][][]*pluginapi.Device{}, clients: map[string]pluginapi.DevicePluginClient{}}
	l, err := net.Listen("unix", filepath.Join(dir, KubeletSocket))
	if err != nil {
		t.Fatal(err)
	}
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.stop)
	return k
}

func (k *fakeKubelet) Register(ctx context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.Version != pluginapi.Version {
		return nil, fmt.Errorf("version %s", r.Version)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c := pluginapi.NewDevicePluginClient(conn)
	opts, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, err
	}
	if !opts.GetPreferredAllocationAvailable || !r.Options.GetPreferredAllocationAvailable {
		conn.Close()
		return nil, errors.New("no preferred allocation")
	}
	stream, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, err
	}
	k.mu.Lock()
	k.registrations = append(k.registrations, r)
	k.clients[r.ResourceName] = c
	k.conns = append(k.conns, conn)
	k.mu.Unlock()
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			k.mu.Lock()
			k.lists[r.ResourceName] = append(k.lists[r.ResourceName], resp.Devices)
			k.mu.Unlock()
		}
	}()
	return &pluginapi.Empty{}, nil
}

// stop stops the kubelet and, as a starting kubelet does, wipes the plugin sockets.
func (k *fakeKubelet) stop() {
	k.srv.Stop()
	k.mu.Lock()
	for _, c := range k.conns {
		c.Close()
	}
	k.conns = nil
	k.mu.Unlock()
	ents, _ := os.ReadDir(k.dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sock") {
			_ = os.Remove(filepath.Join(k.dir, e.Name()))
		}
	}
}

func (k *fakeKubelet) registered(resource string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, r := range k.registrations {
		if r.ResourceName == resource {
			n++
		}
	}
	return n
}

func (k *fakeKubelet) lastList(resource string) []*pluginapi.Device {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.lists[resource]
	if len(l) == 0 {
		return nil
	}
	return l[len(l)-1]
}

func (k *fakeKubelet) client(resource string) pluginapi.DevicePluginClient {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.clients[resource]
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// socketDir is a short directory for unix sockets (their paths are limited to 108
// bytes; t.TempDir's can be longer).
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func i32(v int32) *int32 { return &v }

func gpus(health ...v1alpha1.DeviceHealth) []v1alpha1.PCIDevice {
	addrs := []string{devA, devB, devC, devD}
	out := make([]v1alpha1.PCIDevice, len(health))
	for i, h := range health {
		out[i] = v1alpha1.PCIDevice{Address: addrs[i], Kind: v1alpha1.KindGPU, Driver: "nvidia", NUMANode: i32(int32(i / 2)), Health: h}
	}
	return out
}

type harness struct {
	m      *Manager
	dir    string
	cancel context.CancelFunc
	done   chan error
	pods   func() ([]*corev1.Pod, error)
}

func startManager(t *testing.T, dir string, mutate func(*Config)) *harness {
	t.Helper()
	h := &harness{dir: dir, done: make(chan error, 1)}
	cfg := Config{PluginDir: dir, SysfsRoot: nodeTree, DevRoot: filepath.Join(nodeTree, "dev"), HostDevDir: "/dev",
		Pods: func() ([]*corev1.Pod, error) { return h.pods() }, Resync: 200 * time.Millisecond}
	h.pods = func() ([]*corev1.Pod, error) { return nil, nil }
	if mutate != nil {
		mutate(&cfg)
	}
	m, err := New(cfg, NewMetrics(nil), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- m.Run(ctx) }()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	h.cancel()
	<-h.done
	h.done <- nil // a second stop returns at once
}

func healthOf(list []*pluginapi.Device) string {
	var out []string
	for _, d := range list {
		node := "?"
		if d.Topology != nil && len(d.Topology.Nodes) == 1 {
			node = fmt.Sprint(d.Topology.Nodes[0].ID)
		}
		out = append(out, d.ID+"@"+node+"="+d.Health)
	}
	return strings.Join(out, " ")
}

func TestRegisterListAndWatch(t *testing.T) {
	dir := socketDir(t)
	k := startKubelet(t, dir)
	h := startManager(t, dir, nil)
	const gpu = "sextant.io/gpu"
	h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy), nil)
	want := devA + "@0=Healthy " + devB + "@0=Healthy " + devC + "@1=Healthy " + devD + "@1=Healthy"
	eventually(t, "the first list", func() bool { return healthOf(k.lastList(gpu)) == want })
	if k.registered(gpu) != 1 {
		t.Errorf("%d registrations of %s, want 1", k.registered(gpu), gpu)
	}
	if k.registered("sextant.io/nic") != 0 {
		t.Error("a kind the node does not have was registered")
	}

	// A device turns Unhealthy, then Healthy again: each change is streamed.
	h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Unhealthy, v1alpha1.Healthy, v1alpha1.Healthy), nil)
	wantSick := devA + "@0=Healthy " + devB + "@0=Unhealthy " + devC + "@1=Healthy " + devD + "@1=Healthy"
	eventually(t, "the Unhealthy device", func() bool { return healthOf(k.lastList(gpu)) == wantSick })
	h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy), nil)
	eventually(t, "the device Healthy again", func() bool { return healthOf(k.lastList(gpu)) == want })

	// The same list again sends nothing.
	k.mu.Lock()
	n := len(k.lists[gpu])
	k.mu.Unlock()
	h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy), nil)
	time.Sleep(100 * time.Millisecond)
	k.mu.Lock()
	if len(k.lists[gpu]) != n {
		t.Errorf("an unchanged list was sent again")
	}
	k.mu.Unlock()

	// An excluded device leaves the list; all of a kind excluded leaves it empty.
	h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy), map[string]string{devA: "host"})
	eventually(t, "the excluded device gone", func() bool { return !strings.Contains(healthOf(k.lastList(gpu)), devA) && len(k.lastList(gpu)) == 3 })
	h.m.Update(nil, nil)
	eventually(t, "an empty list", func() bool { k.mu.Lock(); defer k.mu.Unlock(); l := k.lists[gpu]; return len(l[len(l)-1]) == 0 })
}

func TestReregisterWhenKubeletRestarts(t *testing.T) {
	dir := socketDir(t)
	k1 := startKubelet(t, dir)
	// No resync: the file events alone must bring the plugin back.
	h := startManager(t, dir, func(c *Config) { c.Resync = time.Hour })
	const gpu = "sextant.io/gpu"
	h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Healthy), nil)
	eventually(t, "registration", func() bool { return len(k1.lastList(gpu)) == 2 })

	// The kubelet restarts: its socket and the plugin's are removed, its socket comes
	// back.
	k1.stop()
	k2 := startKubelet(t, dir)
	eventually(t, "registration with the new kubelet", func() bool { return len(k2.lastList(gpu)) == 2 })
	if _, err := os.Stat(h.m.Socket(v1alpha1.KindGPU)); err != nil {
		t.Errorf("plugin socket not served again: %v", err)
	}
	// The new kubelet's stream carries changes.
	h.m.Update(gpus(v1alpha1.Unhealthy, v1alpha1.Healthy), nil)
	eventually(t, "a change on the new stream", func() bool { return strings.Contains(healthOf(k2.lastList(gpu)), devA+"@0=Unhealthy") })
	// And the new kubelet can allocate through the new socket.
	resp, err := k2.client(gpu).Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{devB}}}})
	if err != nil || resp.ContainerResponses[0].Envs["SEXTANT_GPU"] != devB {
		t.Errorf("Allocate after the restart: %v, %v", resp, err)
	}
}

// A kubelet restart whose socket event was missed, its plugin socket left in place, is
// found by the next reconcile (every resync): the kubelet's socket is another file.
func TestReregisterOnResync(t *testing.T) {
	dir := socketDir(t)
	k1 := startKubelet(t, dir)
	m, err := New(Config{PluginDir: dir, SysfsRoot: nodeTree, DevRoot: nodeTree + "/dev",
		Pods: func() ([]*corev1.Pod, error) { return nil, nil }}, nil, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, ep := range m.endpointList() {
			ep.stop()
		}
	})
	const gpu = "sextant.io/gpu"
	m.Update(gpus(v1alpha1.Healthy), nil)
	ctx := context.Background()
	m.reconcile(ctx)
	if k1.registered(gpu) != 1 {
		t.Fatalf("%d registrations with the first kubelet, want 1", k1.registered(gpu))
	}
	m.reconcile(ctx)
	if k1.registered(gpu) != 1 {
		t.Errorf("registered again with the same kubelet")
	}
	k1.srv.Stop() // closing its listener removes the socket file
	k2 := startKubelet(t, dir)
	m.reconcile(ctx)
	if k2.registered(gpu) != 1 {
		t.Errorf("%d registrations with the new kubelet, want 1", k2.registered(gpu))
	}
}

// The plugin started before the kubelet: it registers once the kubelet's socket
// appears; and a stale socket file from an earlier agent is replaced.
func TestRegisterWhenKubeletComesUpLate(t *testing.T) {
	dir := socketDir(t)
	stale := filepath.Join(dir, "sextant-gpu.sock")
	if err := os.WriteFile(stale, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startManager(t, dir, func(c *Config) { c.Resync = time.Hour })
	h.m.Update(gpus(v1alpha1.Healthy), nil)
	eventually(t, "the stale socket replaced", func() bool {
		fi, err := os.Stat(stale)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	})
	k := startKubelet(t, dir)
	eventually(t, "registration", func() bool { return k.registered("sextant.io/gpu") == 1 })

	// On the way out the plugin removes its socket.
	h.stop()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plugin socket left behind: %v", err)
	}
}

// The plugin waits for the device-plugins directory (a kubelet that has not run yet).
func TestWaitForPluginDir(t *testing.T) {
	parent := socketDir(t)
	dir := filepath.Join(parent, "dp")
	h := startManager(t, dir, nil)
	h.m.Update(gpus(v1alpha1.Healthy), nil)
	time.Sleep(100 * time.Millisecond)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	k := startKubelet(t, dir)
	eventually(t, "registration", func() bool { return k.registered("sextant.io/gpu") == 1 })
}

func TestGetPreferredAllocationOverGRPC(t *testing.T) {
	dir := socketDir(t)
	k := startKubelet(t, dir)
	p1 := mkPod("p1", 0, "sextant.io/gpu="+devC+","+devD, ctr("main", 2))
	p2 := mkPod("p2", 1, "sextant.io/gpu="+devA+","+devB, ctr("main", 2))
	var kubeletList []*podresourcesapi.PodResources
	h := startManager(t, dir, func(c *Config) {
		c.KubeletPods = func(context.Context) ([]*podresourcesapi.PodResources, error) { return kubeletList, nil }
	})
	h.pods = func() ([]*corev1.Pod, error) { return []*corev1.Pod{p1, p2}, nil }
	const gpu = "sextant.io/gpu"
	h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy), nil)
	eventually(t, "registration", func() bool { return k.client(gpu) != nil })
	ask := func(avail []string, size int32) string {
		t.Helper()
		resp, err := k.client(gpu).GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, AllocationSize: size}}})
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(resp.ContainerResponses[0].DeviceIDs, ",")
	}
	all := []string{devA, devB, devC, devD}
	// Both pending, the kubelet admits p2 (listed, no devices yet); p1 is not listed.
	kubeletList = []*podresourcesapi.PodResources{{Namespace: "default", Name: "p2", Containers: []*podresourcesapi.ContainerResources{{Name: "main"}}}}
	if got := ask(all, 2); got != devA+","+devB {
		t.Errorf("p2 admitted: preferred %s, want p2's %s,%s", got, devA, devB)
	}
	// p2 holds its devices now; p1 is the one left.
	if got := ask([]string{devC, devD}, 2); got != devC+","+devD {
		t.Errorf("p1 admitted: preferred %s, want %s,%s", got, devC, devD)
	}
	// Nobody's devices available: the kubelet's kind of choice.
	if got := ask([]string{devB, devC}, 1); got != devB {
		t.Errorf("fallback: preferred %s, want %s", got, devB)
	}
}

// FreshPods is asked when the cache has no candidate: the kubelet saw the pod first.
func TestGetPreferredAllocationFreshPods(t *testing.T) {
	p := mkPod("late", 0, "sextant.io/gpu="+devC, ctr("main", 1))
	asked := 0
	h := startManager(t, socketDir(t), func(c *Config) {
		c.FreshPods = func(context.Context) ([]*corev1.Pod, error) { asked++; return []*corev1.Pod{p}, nil }
	})
	h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy), nil)
	ep := h.m.endpointList()[0]
	resp, err := ep.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{devA, devB, devC, devD}, AllocationSize: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, []string{devC}) || asked != 1 {
		t.Errorf("preferred %v after %d fresh lists, want [%s] after 1", got, asked, devC)
	}
}

func TestAdmitting(t *testing.T) {
	p1 := mkPod("p1", 0, "sextant.io/gpu="+devA, ctr("main", 1))
	p2 := mkPod("p2", 1, "sextant.io/gpu="+devB, ctr("side", 0), ctr("main", 1))
	p3 := with(mkPod("p3", 2, "sextant.io/gpu="+devC, ctr("main", 0)), func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{ctr("init", 1)} })
	withDevs := func(ids ...string) []*podresourcesapi.ContainerDevices {
		return []*podresourcesapi.ContainerDevices{{ResourceName: string(gpuRes), DeviceIds: ids}}
	}
	list := []*podresourcesapi.PodResources{
		{Namespace: "default", Name: "p1", Containers: []*podresourcesapi.ContainerResources{{Name: "main", Devices: withDevs(devA)}}},
		{Namespace: "default", Name: "p2", Containers: []*podresourcesapi.ContainerResources{{Name: "side"}, {Name: "main",
			Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "example.com/other", DeviceIds: []string{"x"}}}}}},
		{Namespace: "default", Name: "p3", Containers: []*podresourcesapi.ContainerResources{{Name: "main"}}},
	}
	got := Admitting(list, []*corev1.Pod{p1, p2, p3, mkPod("p4", 3, "", ctr("main", 1))}, gpuRes)
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
	}
	// p1 has its device; p2's main waits; p3's only device container is a plain init
	// container PodResources does not list: kept; p4 is unknown to the kubelet.
	if strings.Join(names, ",") != "p2,p3" {
		t.Errorf("admitting = %v, want p2, p3", names)
	}
}

func TestAllocate(t *testing.T) {
	dir := socketDir(t)
	k := startKubelet(t, dir)
	h := startManager(t, dir, func(c *Config) {
		c.CDISpecDirs = []string{filepath.Join(nodeTree, "etc/cdi"), filepath.Join(nodeTree, "var/run/cdi")}
	})
	node := func(n int32) *int32 { return &n }
	h.m.Update([]v1alpha1.PCIDevice{
		{Address: "0000:3b:00.0", Kind: v1alpha1.KindGPU, Driver: "nvidia", NUMANode: node(0), Health: v1alpha1.Healthy},
		{Address: "0000:af:00.0", Kind: v1alpha1.KindGPU, Driver: "nvidia", NUMANode: node(1), Health: v1alpha1.Healthy},
		{Address: "0000:86:00.0", Kind: v1alpha1.KindGPU, Driver: "amdgpu", NUMANode: node(1), Health: v1alpha1.Healthy},
		{Address: "0000:5e:00.0", Kind: v1alpha1.KindNIC, Driver: "vfio-pci", NUMANode: node(0), Health: v1alpha1.Healthy},
		{Address: "0000:d8:00.0", Kind: v1alpha1.KindNVMe, Driver: "nvme", NUMANode: node(1), Health: v1alpha1.Healthy},
		{Address: "0000:00:1f.0", Kind: v1alpha1.KindOther, Driver: "lpc_ich", Health: v1alpha1.Healthy},
	}, nil)
	for _, r := range []string{"sextant.io/gpu", "sextant.io/nic", "sextant.io/nvme"} {
		eventually(t, r+" registered", func() bool { return k.client(r) != nil })
	}
	if k.registered("sextant.io/other") != 0 {
		t.Error("kind other registered")
	}
	alloc := func(resource string, ids ...[]string) *pluginapi.AllocateResponse {
		t.Helper()
		req := &pluginapi.AllocateRequest{}
		for _, c := range ids {
			req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: c})
		}
		resp, err := k.client(resource).Allocate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	specs := func(r *pluginapi.ContainerAllocateResponse) string {
		var out []string
		for _, d := range r.Devices {
			if d.HostPath != d.ContainerPath || d.Permissions != "rw" {
				t.Errorf("device %+v: want the same path inside, rw", d)
			}
			out = append(out, d.HostPath)
		}
		return strings.Join(out, ",")
	}
	cdi := func(r *pluginapi.ContainerAllocateResponse) string {
		var out []string
		for _, d := range r.CdiDevices {
			out = append(out, d.Name)
		}
		return strings.Join(out, ",")
	}

	// Two containers of one pod, each with its own GPUs.
	resp := alloc("sextant.io/gpu", []string{"0000:af:00.0", "0000:3b:00.0"}, []string{"0000:86:00.0"})
	c0, c1 := resp.ContainerResponses[0], resp.ContainerResponses[1]
	if got := c0.Envs["SEXTANT_GPU"]; got != "0000:3b:00.0,0000:af:00.0" {
		t.Errorf("SEXTANT_GPU = %q", got)
	}
	if got, want := specs(c0), "/dev/dri/renderD128,/dev/nvidia-uvm,/dev/nvidia0,/dev/nvidia1,/dev/nvidiactl"; got != want {
		t.Errorf("GPU device nodes = %s, want %s", got, want)
	}
	// Both GPUs are in the container: the "all" device is theirs alone.
	if got, want := cdi(c0), "nvidia.com/gpu=0,nvidia.com/gpu=1,nvidia.com/gpu=all"; got != want {
		t.Errorf("CDI devices = %s, want %s", got, want)
	}
	if got := c1.Envs["SEXTANT_GPU"]; got != "0000:86:00.0" || len(c1.Devices) != 0 || len(c1.CdiDevices) != 0 {
		t.Errorf("AMD GPU without /dev nodes: env %q, devices %v, CDI %v; want the env only", got, c1.Devices, c1.CdiDevices)
	}
	// One of two NVIDIA GPUs: not the "all" device.
	if got := cdi(alloc("sextant.io/gpu", []string{"0000:af:00.0"}).ContainerResponses[0]); got != "nvidia.com/gpu=1" {
		t.Errorf("CDI devices of one GPU = %s", got)
	}

	nic := alloc("sextant.io/nic", []string{"0000:5e:00.0"}).ContainerResponses[0]
	if nic.Envs["SEXTANT_NIC"] != "0000:5e:00.0" || specs(nic) != "/dev/vfio/42,/dev/vfio/vfio" || cdi(nic) != "example.com/nic=0000:5e:00.0" {
		t.Errorf("NIC: env %v, devices %s, CDI %s", nic.Envs, specs(nic), cdi(nic))
	}
	nvme := alloc("sextant.io/nvme", []string{"0000:d8:00.0"}).ContainerResponses[0]
	if got, want := specs(nvme), "/dev/ng1n1,/dev/nvme1,/dev/nvme1n1,/dev/nvme1n1p1"; got != want || nvme.Envs["SEXTANT_NVME"] != "0000:d8:00.0" {
		t.Errorf("NVMe: env %v, devices %s, want %s", nvme.Envs, got, want)
	}

	// A device this resource does not serve is refused.
	_, err := k.client("sextant.io/gpu").Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"0000:5e:00.0"}}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Allocate of a NIC as a GPU: %v, want InvalidArgument", err)
	}
}

// Allocate refuses devices the ranker did not choose for the pod the kubelet admits,
// and hands out the chosen ones.
func TestAllocateRefusesOtherDevices(t *testing.T) {
	dir := socketDir(t)
	k := startKubelet(t, dir)
	chosen := mkPod("chosen", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2))
	plain := mkPod("plain", 1, "", ctr("main", 1))
	// Both are being admitted, as far as PodResources tells: each has a container
	// without devices. Only one asks for two.
	kubeletList := []*podresourcesapi.PodResources{
		{Namespace: "default", Name: "chosen", Containers: []*podresourcesapi.ContainerResources{{Name: "main"}}},
		{Namespace: "default", Name: "plain", Containers: []*podresourcesapi.ContainerResources{{Name: "main"}}},
	}
	var asked atomic.Int32
	h := startManager(t, dir, func(c *Config) {
		c.KubeletPods = func(context.Context) ([]*podresourcesapi.PodResources, error) { asked.Add(1); return kubeletList, nil }
		c.FreshPods = func(context.Context) ([]*corev1.Pod, error) { return []*corev1.Pod{chosen, plain}, nil }
	})
	h.pods = func() ([]*corev1.Pod, error) { return []*corev1.Pod{chosen, plain}, nil }
	const gpu = "sextant.io/gpu"
	h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy), nil)
	eventually(t, "registration", func() bool { return k.client(gpu) != nil })
	allocate := func(ids ...string) error {
		_, err := k.client(gpu).Allocate(context.Background(), &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
		return err
	}
	err := allocate(devA, devC)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "default/chosen ("+devA+","+devB+")") {
		t.Errorf("Allocate of %s,%s for a pod given %s,%s: %v, want FailedPrecondition naming the pod and its devices", devA, devC, devA, devB, err)
	}
	// The refusal was checked again against a fresh list, with the kubelet's one answer.
	if n := asked.Load(); n != 1 {
		t.Errorf("PodResources asked %d times for one Allocate, want 1", n)
	}
	if err := allocate(devB, devA); err != nil {
		t.Errorf("Allocate of the chosen devices: %v", err)
	}
	// A plain pod of one device is not held to anyone's choice.
	if err := allocate(devC); err != nil {
		t.Errorf("Allocate for a plain pod: %v", err)
	}
}

// The cache and the kubelet's PodResources both name the pod being admitted, and it
// was given other devices: the refusal stands when the API server's list, asked to
// confirm it, fails. Its annotation cannot change once bound.
func TestAllocateRefusalStandsWhenFreshListFails(t *testing.T) {
	dir := socketDir(t)
	k := startKubelet(t, dir)
	chosen := mkPod("chosen", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2))
	kubeletList := []*podresourcesapi.PodResources{
		{Namespace: "default", Name: "chosen", Containers: []*podresourcesapi.ContainerResources{{Name: "main"}}},
	}
	h := startManager(t, dir, func(c *Config) {
		c.KubeletPods = func(context.Context) ([]*podresourcesapi.PodResources, error) { return kubeletList, nil }
		c.FreshPods = func(context.Context) ([]*corev1.Pod, error) {
			return nil, errors.New("apiserver: 429 too many requests")
		}
	})
	h.pods = func() ([]*corev1.Pod, error) { return []*corev1.Pod{chosen}, nil }
	const gpu = "sextant.io/gpu"
	h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy), nil)
	eventually(t, "registration", func() bool { return k.client(gpu) != nil })
	_, err := k.client(gpu).Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{devA, devC}}}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "default/chosen ("+devA+","+devB+")") {
		t.Errorf("Allocate of %s,%s for the pod the ranker gave %s,%s while the API server list fails: %v, want FailedPrecondition naming the pod",
			devA, devC, devA, devB, err)
	}
}

// What Allocate does when a lookup fails, and how sextant_device_allocations_unchecked_total
// counts the allocations it lets through without holding them to the ranker's choice.
func TestAllocateUnchecked(t *testing.T) {
	chosen := mkPod("chosen", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2))
	plain := mkPod("plain", 1, "", ctr("main", 2))
	admitted := func(names ...string) []*podresourcesapi.PodResources {
		var out []*podresourcesapi.PodResources
		for _, n := range names {
			out = append(out, &podresourcesapi.PodResources{Namespace: "default", Name: n, Containers: []*podresourcesapi.ContainerResources{{Name: "main"}}})
		}
		return out
	}
	down := errors.New("connection refused")
	tests := []struct {
		name      string
		cached    []*corev1.Pod
		kubelet   []*podresourcesapi.PodResources
		kubeErr   error
		fresh     []*corev1.Pod
		freshErr  error
		ids       []string
		refused   bool
		unchecked string // the reason counted; "" none
	}{
		{name: "identified and chosen: checked", cached: []*corev1.Pod{chosen}, kubelet: admitted("chosen"),
			fresh: []*corev1.Pod{chosen}, ids: []string{devA, devB}},
		{name: "identified, other devices, the API server list fails: refused", cached: []*corev1.Pod{chosen}, kubelet: admitted("chosen"),
			freshErr: down, ids: []string{devA, devC}, refused: true},
		{name: "other devices, PodResources and the API server list fail: let through", cached: []*corev1.Pod{chosen}, kubeErr: down,
			freshErr: down, ids: []string{devA, devC}, unchecked: UncheckedPodResourcesFailed},
		{name: "other devices, PodResources fails, the API server confirms: refused", cached: []*corev1.Pod{chosen}, kubeErr: down,
			fresh: []*corev1.Pod{chosen}, ids: []string{devA, devC}, refused: true},
		{name: "two pods it may be for, PodResources fails: let through on the plain one", cached: []*corev1.Pod{chosen, plain}, kubeErr: down,
			ids: []string{devC, devD}, unchecked: UncheckedPodResourcesFailed},
		{name: "no pod in the cache, the API server list fails", kubelet: admitted("late"), freshErr: down,
			ids: []string{devC, devD}, unchecked: UncheckedFreshListFailed},
		{name: "the kubelet admits none of the cached pods, the API server list fails", cached: []*corev1.Pod{chosen}, kubelet: admitted("late"),
			freshErr: down, ids: []string{devC, devD}, unchecked: UncheckedFreshListFailed},
		{name: "no pod anywhere", kubelet: admitted(), ids: []string{devC, devD}, unchecked: UncheckedNoCandidate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startManager(t, socketDir(t), func(c *Config) {
				c.KubeletPods = func(context.Context) ([]*podresourcesapi.PodResources, error) { return tt.kubelet, tt.kubeErr }
				c.FreshPods = func(context.Context) ([]*corev1.Pod, error) { return tt.fresh, tt.freshErr }
			})
			h.pods = func() ([]*corev1.Pod, error) { return tt.cached, nil }
			h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy), nil)
			ep := h.m.endpointList()[0]
			_, err := ep.Allocate(context.Background(), &pluginapi.AllocateRequest{
				ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: tt.ids}}})
			if refused := status.Code(err) == codes.FailedPrecondition; refused != tt.refused || (err != nil && !refused) {
				t.Errorf("Allocate of %v: %v, want refused %v", tt.ids, err, tt.refused)
			}
			if got := testutil.ToFloat64(h.m.metrics.refused.WithLabelValues(ep.resource)); got != map[bool]float64{true: 1}[tt.refused] {
				t.Errorf("refused counted %v times", got)
			}
			for _, reason := range []string{UncheckedFreshListFailed, UncheckedPodResourcesFailed, UncheckedNoCandidate} {
				want := 0.0
				if reason == tt.unchecked {
					want = 1
				}
				if got := testutil.ToFloat64(h.m.metrics.unchecked.WithLabelValues(ep.resource, reason)); got != want {
					t.Errorf("unchecked{reason=%q} = %v, want %v", reason, got, want)
				}
			}
		})
	}
}

// preferOne asks the manager's one endpoint for a preferred device, all four available.
func preferOne(t *testing.T, h *harness) []string {
	t.Helper()
	h.m.Update(gpus(v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy), nil)
	resp, err := h.m.endpointList()[0].GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{devA, devB, devC, devD}, AllocationSize: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.ContainerResponses[0].DeviceIDs
}

// A fallback is kept off the devices of a pending pod the agent's watch has not
// delivered yet but the API server lists.
func TestGetPreferredAllocationKeepsOffFreshPendingPods(t *testing.T) {
	chosen := mkPod("chosen", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2))
	h := startManager(t, socketDir(t), func(c *Config) {
		c.FreshPods = func(context.Context) ([]*corev1.Pod, error) { return []*corev1.Pod{chosen}, nil }
	})
	if got := preferOne(t, h); !slices.Equal(got, []string{devC}) {
		t.Errorf("a plain pod of one device is offered %v, want %s, off pending pod chosen's %s,%s", got, devC, devA, devB)
	}
}

// A fallback is kept off the devices the audit found held: after a kubelet restart the
// kubelet may offer them although their pods still run on them.
func TestGetPreferredAllocationKeepsOffDevicesInUse(t *testing.T) {
	h := startManager(t, socketDir(t), func(c *Config) {
		c.InUse = func() []string { return []string{devA} }
	})
	plain := mkPod("plain", 0, "", ctr("main", 1))
	h.pods = func() ([]*corev1.Pod, error) { return []*corev1.Pod{plain}, nil }
	if got := preferOne(t, h); !slices.Equal(got, []string{devB}) {
		t.Errorf("a plain pod of one device is offered %v, want %s, off %s, which a pod holds", got, devB, devA)
	}
}

func TestNewValidates(t *testing.T) {
	pods := func() ([]*corev1.Pod, error) { return nil, nil }
	for _, c := range []Config{
		{SysfsRoot: "/x", DevRoot: "/x", Pods: pods},
		{PluginDir: "/x", DevRoot: "/x", Pods: pods},
		{PluginDir: "/x", SysfsRoot: "/x", Pods: pods},
		{PluginDir: "/x", SysfsRoot: "/x", DevRoot: "/x"},
	} {
		if _, err := New(c, nil, logr.Discard()); err == nil {
			t.Errorf("New(%+v) = nil error", c)
		}
	}
}

// The device-plugins directory removed and made again (the kubelet's root reset): the
// plugin waits for it and serves and registers there again.
func TestPluginDirRecreated(t *testing.T) {
	parent := socketDir(t)
	dir := filepath.Join(parent, "dp")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	k1 := startKubelet(t, dir)
	h := startManager(t, dir, func(c *Config) { c.Resync = time.Hour })
	h.m.Update(gpus(v1alpha1.Healthy), nil)
	eventually(t, "registration", func() bool { return k1.registered("sextant.io/gpu") == 1 })
	k1.stop()
	// The plugin may still be re-creating its socket in dir as it is removed ("directory
	// not empty"), as it may when a node's kubelet directory is wiped: retry as rm -rf
	// would be retried.
	eventually(t, "removing the plugin directory", func() bool { return os.RemoveAll(dir) == nil })
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	k2 := startKubelet(t, dir)
	// A plugin that served in the new directory before it saw the old one go registers
	// there again after: the kubelet takes a registration anew, so one or two are right.
	eventually(t, "registration in the new directory", func() bool { return k2.registered("sextant.io/gpu") >= 1 })
}

// A kind served through DRA gets no endpoint; the others still do.
func TestSkipKinds(t *testing.T) {
	dir := socketDir(t)
	k := startKubelet(t, dir)
	h := startManager(t, dir, func(c *Config) { c.SkipKinds = []v1alpha1.DeviceKind{v1alpha1.KindGPU} })
	nic := v1alpha1.PCIDevice{Address: "0000:5e:00.0", Kind: v1alpha1.KindNIC, Health: v1alpha1.Healthy}
	h.m.Update(append(gpus(v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy, v1alpha1.Healthy), nic), nil)
	eventually(t, "the NIC endpoint registered", func() bool { return k.registered("sextant.io/nic") == 1 })
	if n := k.registered("sextant.io/gpu"); n != 0 {
		t.Errorf("%d registrations of sextant.io/gpu, a skipped kind", n)
	}
	if _, err := os.Stat(h.m.Socket(v1alpha1.KindGPU)); !os.IsNotExist(err) {
		t.Errorf("socket of a skipped kind: %v", err)
	}
}
