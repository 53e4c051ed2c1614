package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"sextant.io/sextant/agent/devicefilter"
	"sextant.io/sextant/agent/deviceplugin"
	"sextant.io/sextant/agent/dra"
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

// A pod that turns terminal or starts being deleted asks for an audit pass, once.
func TestPodLeaving(t *testing.T) {
	now := metav1.Now()
	pod := func(phase corev1.PodPhase, deleting bool) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			p.DeletionTimestamp = &now
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		old, new *corev1.Pod
		want     bool
	}{
		{"still running", pod(corev1.PodRunning, false), pod(corev1.PodRunning, false), false},
		{"succeeds", pod(corev1.PodRunning, false), pod(corev1.PodSucceeded, false), true},
		{"fails", pod(corev1.PodPending, false), pod(corev1.PodFailed, false), true},
		{"already terminal", pod(corev1.PodFailed, false), pod(corev1.PodFailed, false), false},
		{"being deleted", pod(corev1.PodRunning, false), pod(corev1.PodRunning, true), true},
		{"still being deleted", pod(corev1.PodRunning, true), pod(corev1.PodRunning, true), false},
		{"terminal while being deleted", pod(corev1.PodRunning, true), pod(corev1.PodSucceeded, true), true},
	} {
		if got := podLeaving(tc.old, tc.new); got != tc.want {
			t.Errorf("%s: podLeaving = %v, want %v", tc.name, got, tc.want)
		}
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
	// Step removes the timers it fires before it returns, so a timer that fired early
	// shows here however late run's goroutine gets to call fire.
	if !clk.HasWaiters() {
		t.Fatal("the pass's timer fired before the settle")
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

// auditTest is the devices' plugin and audit against a fake PodResources API
// and API server, with the pod informer running.
type auditTest struct {
	t      *testing.T
	ctx    context.Context
	kube   *kubefake.Clientset
	fake   *podResources
	pods   cache.SharedIndexInformer
	plugin *deviceplugin.Manager
	// published are the holders the node's NodeTopology named at the start.
	published map[string]v1alpha1.DeviceHolder
	mu        sync.Mutex
	holders   []map[string]v1alpha1.DeviceHolder
}

// setKubelet sets what the fake PodResources API answers: pod holds dev.
func (a *auditTest) setKubelet(pod, dev string) {
	a.fake.mu.Lock()
	defer a.fake.mu.Unlock()
	a.fake.pods = []*podresourcesapi.PodResources{{Namespace: "ns", Name: pod, Containers: []*podresourcesapi.ContainerResources{{
		Name: "main", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "sextant.io/gpu", DeviceIds: []string{dev}}},
	}}}}
}

// lastHolders returns how many times the holders were published and the last ones.
func (a *auditTest) lastHolders() (int, map[string]v1alpha1.DeviceHolder) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.holders) == 0 {
		return 0, nil
	}
	return len(a.holders), a.holders[len(a.holders)-1]
}

// startAuditTest starts the plugin and the audit (periodic passes an hour apart) and
// waits for the audit's first pass; kubelet runs before it, to set what it sees.
func startAuditTest(t *testing.T, kubelet func(*auditTest)) *auditTest {
	t.Helper()
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
	a := &auditTest{t: t, fake: &podResources{}, kube: kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})}
	if kubelet != nil {
		kubelet(a)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, a.fake)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	client, err := podresources.Dial(prSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })

	a.pods = informers.NewSharedInformerFactory(a.kube, 0).Core().V1().Pods().Informer()
	setHolders := func(hs map[string]v1alpha1.DeviceHolder) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.holders = append(a.holders, hs)
	}
	o := runOptions{nodeName: "node-1", devicePlugin: true, devicePluginDir: dir, sysfsRoot: t.TempDir(), devRoot: t.TempDir(), deviceAuditInterval: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	a.ctx = ctx
	g := newGroup(cancel)
	t.Cleanup(func() {
		cancel()
		if err := g.wait(); err != nil {
			t.Errorf("the device plugin stopped: %v", err)
		}
	})
	ag := &agent{o: o, kube: a.kube, pods: a.pods, kubelet: client, reg: prometheus.NewRegistry(), log: logr.Discard()}
	d, err := ag.newDevices(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.start(ctx, g, a.published, setHolders); err != nil {
		t.Fatal(err)
	}
	a.plugin = d.plugin
	g.Go(func() { a.pods.Run(ctx.Done()) })
	waitUntil(t, "the pod informer's first list", a.pods.HasSynced)
	waitUntil(t, "the audit's first pass", func() bool { n, _ := a.lastHolders(); return n > 0 })
	return a
}

// servePlugin gives the plugin the GPUs at addrs and returns a client of its socket.
func (a *auditTest) servePlugin(addrs ...string) pluginapi.DevicePluginClient {
	a.t.Helper()
	var devs []v1alpha1.PCIDevice
	for _, addr := range addrs {
		devs = append(devs, v1alpha1.PCIDevice{Address: addr, Kind: v1alpha1.KindGPU, Health: v1alpha1.Healthy})
	}
	a.plugin.Update(devs, nil)
	sock := a.plugin.Socket(v1alpha1.KindGPU)
	waitUntil(a.t, "the plugin's socket", func() bool { _, err := os.Stat(sock); return err == nil })
	// The socket's file exists from its bind, a moment before the plugin listens on it:
	// the calls wait for the connection instead of failing on a refusal.
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// A device the kubelet hands to a pod the ranker did not place (Allocate) gets its
// holder published while no container of the pod runs yet, not at the next periodic
// audit (an hour here).
func TestAuditAfterAllocate(t *testing.T) {
	a := startAuditTest(t, nil)
	const gpu = "0000:3b:00.0"
	client := a.servePlugin(gpu)
	// The kubelet records the devices once Allocate answered (the pod's container waits
	// for its image); the answer is set before, so the pass a settle after Allocate sees
	// it however slowly this goroutine runs.
	a.setKubelet("other-scheduler", gpu)
	if _, err := client.Allocate(a.ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{gpu}}},
	}); err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	waitUntil(t, "the holder of the allocated device", func() bool {
		_, hs := a.lastHolders()
		return hs[gpu].Name == "other-scheduler"
	})
}

// A pod deleted from the node has its devices published as free by a pass soon after,
// not at the next periodic audit (an hour here), so the ranker does not preempt for
// them.
func TestAuditAfterPodDeleted(t *testing.T) {
	const gpu = "0000:3b:00.0"
	a := startAuditTest(t, func(a *auditTest) { a.setKubelet("job-x", gpu) })
	if _, hs := a.lastHolders(); hs[gpu].Name != "job-x" {
		t.Fatalf("holders after the first pass %v, want %s held by job-x", hs, gpu)
	}
	// Created after the informer's list, the pod comes through its watch: the deletion
	// cannot fall between the list and the watch. No container runs: adding it starts
	// no pass.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job-x", UID: "uid-x"}, Spec: corev1.PodSpec{NodeName: "node-1"}}
	if _, err := a.kube.CoreV1().Pods("ns").Create(a.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the informer to see the pod", func() bool {
		_, ok, _ := a.pods.GetStore().GetByKey("ns/job-x")
		return ok
	})
	a.fake.mu.Lock()
	a.fake.pods = nil // the kubelet let the pod's devices go
	a.fake.mu.Unlock()
	if err := a.kube.CoreV1().Pods("ns").Delete(a.ctx, "job-x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the device published as free", func() bool {
		_, hs := a.lastHolders()
		_, held := hs[gpu]
		return !held
	})
}

// An agent that starts after the kubelet forgot the device of a running pod publishes
// the holder its node published before, not the kubelet's "free".
func TestAuditKeepsPublishedHolders(t *testing.T) {
	const gpu = "0000:3b:00.0"
	a := startAuditTest(t, func(a *auditTest) {
		one := corev1.ResourceList{"sextant.io/gpu": resource.MustParse("1")}
		running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "train", UID: "uid-train"},
			Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		// The pod of another scheduler the kubelet admits next.
		plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain", UID: "uid-plain"},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "main",
				Resources: corev1.ResourceRequirements{Requests: one, Limits: one}}}}}
		for _, pod := range []*corev1.Pod{running, plain} {
			if _, err := a.kube.CoreV1().Pods("ns").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		a.published = map[string]v1alpha1.DeviceHolder{gpu: {Namespace: "ns", Name: "train", UID: "uid-train"}}
		a.fake.pods = []*podresourcesapi.PodResources{{Namespace: "ns", Name: "train"}} // listed without devices
	})
	if n, hs := a.lastHolders(); n != 1 || hs[gpu] != a.published[gpu] {
		t.Errorf("first pass: published %d times, holders %v; want once, %s held by ns/train", n, hs, gpu)
	}
	// The kubelet offers the held device to plain: the plugin prefers the other.
	const other = "0000:3c:00.0"
	resp, err := a.servePlugin(gpu, other).GetPreferredAllocation(a.ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{gpu, other}, AllocationSize: 1}}})
	if err != nil {
		t.Fatalf("GetPreferredAllocation: %v", err)
	}
	if got := resp.ContainerResponses[0].DeviceIDs; len(got) != 1 || got[0] != other {
		t.Errorf("a plain pod is offered %v, want %s, off %s, which ns/train holds", got, other, gpu)
	}
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

// With a DRA driver, the devices of its kinds are published as kept from the ranker's
// choice, and the driver is given only the host filter's exclusions.
func TestOnDevicesWithDRA(t *testing.T) {
	root := t.TempDir()
	drv, err := dra.New(dra.Config{
		NodeName: "n1", Kinds: []v1alpha1.DeviceKind{v1alpha1.KindAccelerator}, Kube: fake.NewClientset(),
		PluginDir: root, RegistrarDir: root, CDIDir: root,
	}, dra.NewMetrics(nil), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	d := &devices{
		selector: &devicefilter.Selector{Root: root, Rules: devicefilter.Rules{{Include: false, Field: "address", Value: "0000:3c:00.0"}}},
		dra:      drv, log: logr.Discard(),
	}
	got := d.onDevices([]v1alpha1.PCIDevice{
		{Address: "0000:3b:00.0", Kind: v1alpha1.KindAccelerator, Health: v1alpha1.Healthy},
		{Address: "0000:3c:00.0", Kind: v1alpha1.KindAccelerator, Health: v1alpha1.Healthy},
		{Address: "0000:5f:00.0", Kind: v1alpha1.KindGPU, Health: v1alpha1.Healthy},
	})
	if got["0000:3b:00.0"] != servedThroughDRA {
		t.Errorf("DRA accelerator published as %q, want %q", got["0000:3b:00.0"], servedThroughDRA)
	}
	if !strings.HasPrefix(got["0000:3c:00.0"], "excluded by the device filter") {
		t.Errorf("filtered accelerator published as %q, want the filter's reason", got["0000:3c:00.0"])
	}
	if got["0000:5f:00.0"] != "" {
		t.Errorf("a GPU, not served through DRA, published as %q", got["0000:5f:00.0"])
	}
}
