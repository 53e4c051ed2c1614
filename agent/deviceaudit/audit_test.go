package deviceaudit

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"sextant.io/sextant/api/annotations"
)

const (
	gpu  = "sextant.io/gpu"
	nic  = "sextant.io/nic"
	devA = "0000:3b:00.0"
	devB = "0000:3c:00.0"
	devC = "0000:af:00.0"
	devD = "0000:b0:00.0"
	devN = "0000:5e:00.0"
)

func mkPod(name string, running bool, alloc annotations.Allocation, containers ...corev1.Container) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-0123456789")},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: containers},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	if running {
		p.Status.Phase = corev1.PodRunning
	}
	if alloc != nil {
		p.Annotations = map[string]string{annotations.DevicesAllocated: alloc.String()}
	}
	return p
}

func ctr(name string, res corev1.ResourceName, n int64) corev1.Container {
	c := corev1.Container{Name: name}
	if n > 0 {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		c.Resources.Limits = corev1.ResourceList{res: q}
	}
	return c
}

func listed(name string, containers ...*podresourcesapi.ContainerResources) *podresourcesapi.PodResources {
	return &podresourcesapi.PodResources{Namespace: "ns", Name: name, Containers: containers}
}

func cres(name string, res string, ids ...string) *podresourcesapi.ContainerResources {
	c := &podresourcesapi.ContainerResources{Name: name}
	if len(ids) > 0 {
		c.Devices = []*podresourcesapi.ContainerDevices{{ResourceName: res, DeviceIds: ids}}
	}
	return c
}

func TestCompare(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pods := []*corev1.Pod{
		mkPod("good", true, annotations.Allocation{gpu: {devA, devB}}, ctr("main", gpu, 2)),
		mkPod("swapped", true, annotations.Allocation{gpu: {devC}}, ctr("main", gpu, 1)),
		mkPod("pending", false, annotations.Allocation{gpu: {devA}}, ctr("main", gpu, 1)),
		mkPod("other-scheduler", true, nil, ctr("main", gpu, 1)),
		func() *corev1.Pod {
			p := mkPod("init", true, annotations.Allocation{gpu: {devA, devB}}, ctr("main", gpu, 1))
			p.Spec.InitContainers = []corev1.Container{ctr("prep", gpu, 2)}
			return p
		}(),
		func() *corev1.Pod {
			p := mkPod("sidecar", true, annotations.Allocation{gpu: {devA, devB}}, ctr("main", gpu, 1))
			sc := ctr("side", gpu, 1)
			sc.RestartPolicy = &always
			p.Spec.InitContainers = []corev1.Container{sc}
			return p
		}(),
		mkPod("extra-kind", true, annotations.Allocation{gpu: {devD}}, ctr("main", gpu, 1), ctr("net", nic, 1)),
		func() *corev1.Pod {
			p := mkPod("malformed", true, nil, ctr("main", gpu, 1))
			p.Annotations = map[string]string{annotations.DevicesAllocated: "{"}
			return p
		}(),
	}
	list := []*podresourcesapi.PodResources{
		listed("good", cres("main", gpu, devB, devA)),
		listed("swapped", cres("main", gpu, devD)),
		listed("pending", cres("main", gpu, devC)),
		listed("other-scheduler", cres("main", gpu, devD)),
		listed("init", cres("main", gpu, devA)),    // the init container's devB is not listed
		listed("sidecar", cres("main", gpu, devA)), // the sidecar is listed, and has nothing
		listed("extra-kind", cres("main", gpu, devD), cres("net", nic, devN)),
		listed("malformed", cres("main", gpu, devC)),
		listed("uncached", cres("main", gpu, devB), cres("x", "nvidia.com/gpu", "GPU-1")),
	}
	holders, mismatches := Compare(list, pods)
	var got []string
	for _, m := range mismatches {
		got = append(got, m.Pod.Name+" "+string(m.Resource)+" ["+strings.Join(m.Annotated, ",")+"] ["+strings.Join(m.Assigned, ",")+"]")
	}
	want := []string{
		"extra-kind sextant.io/nic [] [" + devN + "]",
		"sidecar sextant.io/gpu [" + devA + "," + devB + "] [" + devA + "]",
		"swapped sextant.io/gpu [" + devC + "] [" + devD + "]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mismatches:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Holders: the last pod listed with a device wins (the kubelet never gives one
	// device to two pods); pods outside the cache have no UID; other resources are not
	// sextant's.
	if h := holders[devC]; h.Name != "malformed" || h.UID != "malformed-0123456789" {
		t.Errorf("holder of %s = %+v", devC, h)
	}
	if h := holders[devN]; h.Name != "extra-kind" || h.Namespace != "ns" {
		t.Errorf("holder of %s = %+v", devN, h)
	}
	if h := holders[devB]; h.Name != "uncached" || h.UID != "" {
		t.Errorf("holder of %s = %+v, want uncached without a UID", devB, h)
	}
	if _, ok := holders["GPU-1"]; ok {
		t.Error("a device of another resource is listed")
	}
	if len(holders) != 5 {
		t.Errorf("%d holders, want 5: %v", len(holders), holders)
	}
}

func TestAuditor(t *testing.T) {
	swapped := mkPod("swapped", true, annotations.Allocation{gpu: {devC}}, ctr("main", gpu, 1))
	pods := []*corev1.Pod{swapped}
	list := []*podresourcesapi.PodResources{listed("swapped", cres("main", gpu, devD))}
	kube := fake.NewClientset()
	failEvents := 1
	kube.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failEvents > 0 {
			failEvents--
			return true, nil, errors.New("apiserver away")
		}
		return false, nil, nil
	})
	var published []map[string]Holder
	m := NewMetrics(nil)
	a := New(Config{NodeName: "node-1", OnHolders: func(h map[string]Holder) { published = append(published, h) }}, kube,
		func(context.Context) ([]*podresourcesapi.PodResources, error) { return list, nil },
		func() ([]*corev1.Pod, error) { return pods, nil }, m, logr.Discard())
	ctx := context.Background()
	events := func() []corev1.Event {
		evs, err := kube.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return evs.Items
	}

	// First pass: the event cannot be recorded, the mismatch is counted.
	if ms, err := a.Audit(ctx); err != nil || len(ms) != 1 {
		t.Fatalf("Audit = %v, %v", ms, err)
	}
	if n := len(events()); n != 0 {
		t.Fatalf("%d events with the API server away", n)
	}
	// Second pass: the event is recorded now; the mismatch is not counted again.
	if _, err := a.Audit(ctx); err != nil {
		t.Fatal(err)
	}
	evs := events()
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
	ev := evs[0]
	if ev.Name != "swapped.swapped-.device-mismatch" || ev.Type != corev1.EventTypeWarning || ev.Reason != ReasonMismatch ||
		ev.InvolvedObject.UID != swapped.UID || !strings.Contains(ev.Message, "the ranker chose ["+devC+"], the kubelet assigned ["+devD+"]") {
		t.Errorf("event %s: %s %s %q", ev.Name, ev.Type, ev.Reason, ev.Message)
	}
	if got := testutil.ToFloat64(m.mismatches.WithLabelValues(gpu)); got != 1 {
		t.Errorf("mismatches counted %v, want 1", got)
	}
	// Third pass: nothing new, and an agent restarting (a new Auditor) names the same
	// event, which exists already.
	if _, err := a.Audit(ctx); err != nil {
		t.Fatal(err)
	}
	b := New(Config{NodeName: "node-1"}, kube, func(context.Context) ([]*podresourcesapi.PodResources, error) { return list, nil },
		func() ([]*corev1.Pod, error) { return pods, nil }, nil, logr.Discard())
	if _, err := b.Audit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(events()); n != 1 {
		t.Errorf("%d events after more passes and a restart, want 1", n)
	}
	if got := testutil.ToFloat64(m.mismatches.WithLabelValues(gpu)); got != 1 {
		t.Errorf("mismatches counted %v, want 1", got)
	}
	// Holders are published once, and again only when they change.
	if len(published) != 1 || published[0][devD].Name != "swapped" {
		t.Errorf("published %v, want one map with %s held by swapped", published, devD)
	}
	list = nil
	pods = nil
	if _, err := a.Audit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(published) != 2 || len(published[1]) != 0 || len(a.Holders()) != 0 {
		t.Errorf("published %v, want a second, empty map", published)
	}
	// The pod gone, its memory is dropped: a new pod of the same name is new.
	a.mu.Lock()
	if len(a.reported)+len(a.evented) != 0 {
		t.Errorf("memory of gone pods kept: %v %v", a.reported, a.evented)
	}
	a.mu.Unlock()
}

// TestAuditorForeignEvent: another node's agent, which may list every pod, created an
// event under the name this node's warning takes; the warning is recorded all the same.
func TestAuditorForeignEvent(t *testing.T) {
	swapped := mkPod("swapped", true, annotations.Allocation{gpu: {devC}}, ctr("main", gpu, 1))
	squat := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "swapped.swapped-.device-mismatch", Namespace: "ns"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "ns", Name: "swapped", UID: swapped.UID},
		Reason:         "Nothing", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "sextant-agent", Host: "node-2"}, ReportingInstance: "sextant-agent-node-2",
	}
	kube := fake.NewClientset(squat)
	// The fake does not generate names; the API server does.
	kube.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event); ev.Name == "" {
			ev.Name = ev.GenerateName + "x1y2z"
		}
		return false, nil, nil
	})
	list := []*podresourcesapi.PodResources{listed("swapped", cres("main", gpu, devD))}
	a := New(Config{NodeName: "node-1", Component: "sextant-agent"}, kube,
		func(context.Context) ([]*podresourcesapi.PodResources, error) { return list, nil },
		func() ([]*corev1.Pod, error) { return []*corev1.Pod{swapped}, nil }, nil, logr.Discard())
	if _, err := a.Audit(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs, err := kube.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var warned bool
	for _, ev := range evs.Items {
		if ev.Source.Host == "node-1" && ev.Reason == ReasonMismatch && ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.UID == swapped.UID {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no %s Warning from node-1 among %d events: node-2's event under its name silenced it", ReasonMismatch, len(evs.Items))
	}
}

// TestAuditorKeepsForgottenHolders: a kubelet that stops listing a running pod's
// devices (its List raced its own start) does not free them for the ranker; the pod
// stays their holder until it ends or another pod is listed with them.
func TestAuditorKeepsForgottenHolders(t *testing.T) {
	other := mkPod("other", true, nil, ctr("main", gpu, 2))
	unknown := listed("unknown", cres("main", gpu, devC)) // not in the agent's cache yet
	pods := []*corev1.Pod{other}
	list := []*podresourcesapi.PodResources{listed("other", cres("main", gpu, devA, devB)), unknown}
	var published []map[string]Holder
	a := New(Config{NodeName: "node-1", OnHolders: func(h map[string]Holder) { published = append(published, h) }}, fake.NewClientset(),
		func(context.Context) ([]*podresourcesapi.PodResources, error) { return list, nil },
		func() ([]*corev1.Pod, error) { return pods, nil }, nil, logr.Discard())
	ctx := context.Background()
	pass := func(step string, want map[string]string) {
		t.Helper()
		if _, err := a.Audit(ctx); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for addr, h := range a.Holders() {
			got[addr] = h.Name
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: holders %v, want %v", step, got, want)
		}
	}
	holderOther := Holder{Namespace: "ns", Name: "other", UID: other.UID}

	pass("listed", map[string]string{devA: "other", devB: "other", devC: "unknown"})
	// The kubelet restarted and forgot: the pod is still listed, without devices.
	list = []*podresourcesapi.PodResources{listed("other", cres("main", gpu))}
	pass("forgotten", map[string]string{devA: "other", devB: "other"})
	if n := len(published); n != 2 || published[1][devA] != holderOther {
		t.Errorf("published %d times (%v), want twice, the second without the uncached pod's device", n, published)
	}
	// The kubelet gives one of them to another pod: that pod is its holder now.
	list = []*podresourcesapi.PodResources{listed("second", cres("main", gpu, devB))}
	pass("taken", map[string]string{devA: "other", devB: "second"})
	// The kubelet admits other again and gives it another device: its list is the truth.
	list = []*podresourcesapi.PodResources{listed("second", cres("main", gpu, devB)), listed("other", cres("main", gpu, devC))}
	pass("given again", map[string]string{devB: "second", devC: "other"})
	list = []*podresourcesapi.PodResources{listed("second", cres("main", gpu, devB))}
	a.holders[devA] = holderOther
	// The pod ends: its device is free.
	ended := other.DeepCopy()
	ended.Status.Phase = corev1.PodSucceeded
	pods = []*corev1.Pod{ended}
	pass("ended", map[string]string{devB: "second"})
	// A pod the cache no longer has holds nothing either.
	a.holders[devA] = holderOther
	pods = nil
	pass("gone", map[string]string{devB: "second"})
}

// An agent that starts after the kubelet forgot an allocation has never seen the kubelet
// list it: the holders its node published before are what it keeps.
func TestAuditorKeepsPublishedHolders(t *testing.T) {
	other := mkPod("other", true, nil, ctr("main", gpu, 1))
	ended := mkPod("ended", false, nil, ctr("main", gpu, 1))
	ended.Status.Phase = corev1.PodFailed
	pods := []*corev1.Pod{other, ended}
	// The kubelet lists the pods without their devices.
	list := []*podresourcesapi.PodResources{listed("other", cres("main", gpu)), listed("ended", cres("main", gpu))}
	published := map[string]Holder{
		devA: {Namespace: "ns", Name: "other", UID: other.UID},
		devB: {Namespace: "ns", Name: "ended", UID: ended.UID}, // its pod has finished
		devC: {Namespace: "ns", Name: "gone", UID: "gone-uid"}, // its pod left the node
		devD: {Namespace: "ns", Name: "other"},                 // published before the agent saw the pod
	}
	var onHolders []map[string]Holder
	a := New(Config{NodeName: "node-1", Published: published, OnHolders: func(h map[string]Holder) { onHolders = append(onHolders, h) }},
		fake.NewClientset(), func(context.Context) ([]*podresourcesapi.PodResources, error) { return list, nil },
		func() ([]*corev1.Pod, error) { return pods, nil }, nil, logr.Discard())
	for pass := 1; pass <= 2; pass++ {
		if _, err := a.Audit(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := map[string]Holder{devA: published[devA]}
		if got := a.Holders(); !maps.Equal(got, want) {
			t.Errorf("pass %d: holders %v, want %v", pass, got, want)
		}
	}
	if len(onHolders) != 1 || !maps.Equal(onHolders[0], map[string]Holder{devA: published[devA]}) {
		t.Errorf("published %v, want the kept holder once", onHolders)
	}
}

func TestAuditorListFails(t *testing.T) {
	m := NewMetrics(nil)
	a := New(Config{}, nil, func(context.Context) ([]*podresourcesapi.PodResources, error) { return nil, errors.New("no kubelet") },
		func() ([]*corev1.Pod, error) { return nil, nil }, m, logr.Discard())
	if _, err := a.Audit(context.Background()); err == nil || !strings.Contains(err.Error(), "no kubelet") {
		t.Errorf("Audit = %v, want the kubelet's error", err)
	}
	if got := testutil.ToFloat64(m.audits.WithLabelValues("failed")); got != 1 {
		t.Errorf("failed audits %v, want 1", got)
	}
}

type fakePodResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	list []*podresourcesapi.PodResources
}

func (f *fakePodResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: f.list}, nil
}

// The auditor over the kubelet's real gRPC API, as the agent wires it.
func TestAuditorOverPodResources(t *testing.T) {
	dir, err := os.MkdirTemp("", "pr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, &fakePodResources{list: []*podresourcesapi.PodResources{listed("p", cres("main", gpu, devA))}})
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := podresourcesapi.NewPodResourcesListerClient(conn)
	list := func(ctx context.Context) ([]*podresourcesapi.PodResources, error) {
		resp, err := client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
		return resp.GetPodResources(), err
	}
	p := mkPod("p", true, annotations.Allocation{gpu: {devB}}, ctr("main", gpu, 1))
	a := New(Config{}, fake.NewClientset(), list, func() ([]*corev1.Pod, error) { return []*corev1.Pod{p}, nil }, nil, logr.Discard())
	ms, err := a.Audit(context.Background())
	if err != nil || len(ms) != 1 || a.Holders()[devA].UID != p.UID {
		t.Errorf("Audit = %v, %v; holders %v", ms, err, a.Holders())
	}
}
