package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"sextant.io/sextant/agent/podresources"
	"sextant.io/sextant/api/v1alpha1"
)

// The device audit runs when a container starts (or starts again), and only then.
func TestContainerStarted(t *testing.T) {
	at := func(sec int64) metav1.Time { return metav1.NewTime(time.Unix(sec, 0)) }
	pod := func(init, main []corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: init, ContainerStatuses: main}}
	}
	running := func(name string, sec int64) corev1.ContainerStatus {
		started := at(sec)
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}
	}
	waiting := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	}
	for _, tc := range []struct {
		name     string
		old, new *corev1.Pod
		want     bool
	}{
		{"nothing runs", pod(nil, []corev1.ContainerStatus{waiting("main")}), pod(nil, []corev1.ContainerStatus{waiting("main")}), false},
		{"main starts", pod(nil, []corev1.ContainerStatus{waiting("main")}), pod(nil, []corev1.ContainerStatus{running("main", 10)}), true},
		{"an init container starts", pod([]corev1.ContainerStatus{waiting("init")}, nil), pod([]corev1.ContainerStatus{running("init", 10)}, nil), true},
		{"still running", pod(nil, []corev1.ContainerStatus{running("main", 10)}), pod(nil, []corev1.ContainerStatus{running("main", 10)}), false},
		{"restarted", pod(nil, []corev1.ContainerStatus{running("main", 10)}), pod(nil, []corev1.ContainerStatus{running("main", 20)}), true},
		{"stops", pod(nil, []corev1.ContainerStatus{running("main", 10)}), pod(nil, []corev1.ContainerStatus{waiting("main")}), false},
		{"a second one starts", pod(nil, []corev1.ContainerStatus{running("a", 10), waiting("b")}), pod(nil, []corev1.ContainerStatus{running("a", 10), running("b", 11)}), true},
	} {
		if got := containerStarted(tc.old, tc.new); got != tc.want {
			t.Errorf("%s: containerStarted = %v, want %v", tc.name, got, tc.want)
		}
	}
	if n := runningContainers(pod([]corev1.ContainerStatus{running("init", 1)}, []corev1.ContainerStatus{running("main", 2), waiting("b")})); n != 2 {
		t.Errorf("runningContainers = %d, want 2", n)
	}
}

// A burst of Allocates costs one audit pass a settle later, and a poke while that pass
// is awaited one more a settle after it; poke never waits for the pass.
func TestCoalescer(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	c := newCoalescer(clk, time.Second)
	var fired atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	for range 100 {
		c.poke() // nothing takes them yet: held as one
	}
	go func() { defer close(done); c.run(ctx, func() { fired.Add(1) }) }()
	waitUntil(t, "the first pass to be scheduled", clk.HasWaiters)
	for range 100 {
		c.poke() // while the pass is awaited: held as one more
	}
	clk.Step(time.Second - time.Millisecond)
	if n := fired.Load(); n != 0 {
		t.Fatalf("%d passes before the settle, want 0", n)
	}
	clk.Step(time.Millisecond)
	waitUntil(t, "the first pass", func() bool { return fired.Load() == 1 })
	waitUntil(t, "the pass for the pokes that came while waiting", clk.HasWaiters)
	clk.Step(time.Second)
	waitUntil(t, "the second pass", func() bool { return fired.Load() == 2 })
	if len(c.pokes) != 0 || fired.Load() != 2 {
		t.Errorf("after two passes: %d pokes held, %d passes; want none held, 2 passes", len(c.pokes), fired.Load())
	}
}

// podResources is the kubelet's PodResources API answering with pods the test sets.
type podResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	mu   sync.Mutex
	pods []*podresourcesapi.PodResources
}

func (f *podResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &podresourcesapi.ListPodResourcesResponse{PodResources: f.pods}, nil
}

func (f *podResources) GetAllocatableResources(context.Context, *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	return &podresourcesapi.AllocatableResourcesResponse{}, nil
}

// A device the kubelet hands to a pod the ranker did not place (Allocate) gets its
// holder published while no container of the pod runs yet, not at the next periodic
// audit (an hour here).
func TestAuditAfterAllocate(t *testing.T) {
	dir, err := os.MkdirTemp("", "sx") // unix socket paths are short; t.TempDir's may not be
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	prSock := filepath.Join(dir, "pod-resources.sock")
	l, err := net.Listen("unix", prSock)
	if err != nil {
		t.Fatal(err)
	}
	fake := &podResources{}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, fake)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	kubelet, err := podresources.Dial(prSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kubelet.Close() })

	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	pods := informers.NewSharedInformerFactory(kube, 0).Core().V1().Pods().Informer()
	listPods := func() ([]*corev1.Pod, error) { return nil, nil }
	freshPods := func(context.Context) ([]*corev1.Pod, error) { return nil, nil }
	var (
		mu      sync.Mutex
		holders []map[string]v1alpha1.DeviceHolder
	)
	setHolders := func(hs map[string]v1alpha1.DeviceHolder) {
		mu.Lock()
		defer mu.Unlock()
		holders = append(holders, hs)
	}
	lastHolders := func() (int, map[string]v1alpha1.DeviceHolder) {
		mu.Lock()
		defer mu.Unlock()
		if len(holders) == 0 {
			return 0, nil
		}
		return len(holders), holders[len(holders)-1]
	}
	o := runOptions{nodeName: "node-1", devicePluginDir: dir, sysfsRoot: t.TempDir(), devRoot: t.TempDir(), deviceAuditInterval: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	fail := func(err error) { t.Errorf("the device plugin stopped: %v", err) }
	plugin, err := startPlugin(ctx, &wg, o, kube, pods, listPods, freshPods, kubelet, setHolders, prometheus.NewRegistry(), fail, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	const gpu = "0000:3b:00.0"
	plugin.Update([]v1alpha1.PCIDevice{{Address: gpu, Kind: v1alpha1.KindGPU, Health: v1alpha1.Healthy}}, nil)
	waitUntil(t, "the audit's first pass", func() bool { n, _ := lastHolders(); return n > 0 })
	sock := plugin.Socket(v1alpha1.KindGPU)
	waitUntil(t, "the plugin's socket", func() bool { _, err := os.Stat(sock); return err == nil })

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := pluginapi.NewDevicePluginClient(conn).Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{gpu}}},
	}); err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	// The kubelet records the devices once Allocate answered; the pod's container waits
	// for its image.
	fake.mu.Lock()
	fake.pods = []*podresourcesapi.PodResources{{Namespace: "ns", Name: "other-scheduler", Containers: []*podresourcesapi.ContainerResources{{
		Name: "main", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "sextant.io/gpu", DeviceIds: []string{gpu}}},
	}}}}
	fake.mu.Unlock()
	waitUntil(t, "the holder of the allocated device", func() bool {
		_, hs := lastHolders()
		return hs[gpu].Name == "other-scheduler"
	})
}

// waitUntil polls cond until it holds or a deadline far beyond what it needs passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}
