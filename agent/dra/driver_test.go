package dra

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"sextant.io/sextant/agent/deviceplugin"
	"sextant.io/sextant/api/v1alpha1"
)

// nodeTree is the device plugin's node fixture: sysfs, /dev and vendors' CDI specs.
const nodeTree = "../deviceplugin/testdata/node"

func newDriver(t *testing.T, cdiDir string) *Driver {
	t.Helper()
	dir := shortDir(t)
	d, err := New(Config{
		NodeName: "node-a", Kinds: []v1alpha1.DeviceKind{v1alpha1.KindGPU, v1alpha1.KindNVMe},
		Kube:      fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-a-uid"}}),
		PluginDir: filepath.Join(dir, "plugin"), RegistrarDir: filepath.Join(dir, "registry"), CDIDir: cdiDir,
		Locator: deviceplugin.Locator{
			SysfsRoot: nodeTree, DevRoot: filepath.Join(nodeTree, "dev"), HostDevDir: "/dev",
			CDISpecDirs: []string{filepath.Join(nodeTree, "etc/cdi")}, Log: testr.New(t),
		},
	}, NewMetrics(nil), testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	numa := func(n int32) *int32 { return &n }
	d.Update([]v1alpha1.PCIDevice{
		{Address: "0000:3b:00.0", Kind: v1alpha1.KindGPU, Driver: "nvidia", NUMANode: numa(0), Health: v1alpha1.Healthy},
		{Address: "0000:af:00.0", Kind: v1alpha1.KindGPU, Driver: "nvidia", NUMANode: numa(1), Health: v1alpha1.Healthy},
		{Address: "0000:86:00.0", Kind: v1alpha1.KindGPU, Driver: "amdgpu", NUMANode: numa(1), Health: v1alpha1.Unhealthy},
		{Address: "0000:d8:00.0", Kind: v1alpha1.KindNVMe, Driver: "nvme", NUMANode: numa(1), Health: v1alpha1.Healthy},
		{Address: "0000:5e:00.0", Kind: v1alpha1.KindNIC, Driver: "vfio-pci", NUMANode: numa(0), Health: v1alpha1.Healthy},
	}, map[string]string{"0000:d8:00.0": "backs /"})
	return d
}

// shortDir is a directory for Unix sockets, whose paths must stay under 108 bytes.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type result struct{ request, pool, device, driver string }

func claim(uid string, results ...result) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim-" + uid, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, r := range results {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: r.request, Pool: r.pool, Device: r.device, Driver: cmpOr(r.driver, DriverName),
		})
	}
	return c
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func prepare(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	out, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	return out[c.UID]
}

func readSpec(t *testing.T, dir string, uid types.UID) cdiSpec {
	t.Helper()
	b, err := os.ReadFile(specPath(dir, uid))
	if err != nil {
		t.Fatal(err)
	}
	var s cdiSpec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPrepareWritesExactlyTheClaimsDevices(t *testing.T) {
	cdiDir := t.TempDir()
	d := newDriver(t, cdiDir)
	res := prepare(t, d, claim("uid-1",
		result{request: "gpus", pool: "node-a", device: "gpu-0000-af-00-0"},
		result{request: "gpus", pool: "node-a", device: "gpu-0000-3b-00-0"},
		result{request: "other", pool: "elsewhere", device: "x", driver: "gpu.example.com"},
	))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var ids [][]string
	for _, dev := range res.Devices {
		if dev.PoolName != "node-a" || !slices.Equal(dev.Requests, []string{"gpus"}) {
			t.Errorf("device %+v: want pool node-a, request gpus", dev)
		}
		ids = append(ids, dev.CDIDeviceIDs)
	}
	want := [][]string{
		{"sextant.io/claim=uid-1-gpu-0000-af-00-0", "nvidia.com/gpu=1"},
		{"sextant.io/claim=uid-1-gpu-0000-3b-00-0", "nvidia.com/gpu=0"},
	}
	if !slices.EqualFunc(ids, want, slices.Equal) {
		t.Errorf("CDI IDs = %v, want %v", ids, want)
	}
	spec := readSpec(t, cdiDir, "uid-1")
	if spec.Kind != "sextant.io/claim" || len(spec.Devices) != 2 {
		t.Fatalf("spec = %+v", spec)
	}
	for _, dev := range spec.Devices {
		if !slices.Equal(dev.ContainerEdits.Env, []string{"SEXTANT_GPU=0000:3b:00.0,0000:af:00.0"}) {
			t.Errorf("%s env = %v", dev.Name, dev.ContainerEdits.Env)
		}
	}
	var nodes []string
	for _, n := range spec.Devices[1].ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.HostPath)
	}
	if got, want := strings.Join(nodes, ","), "/dev/dri/renderD128,/dev/nvidia-uvm,/dev/nvidia0,/dev/nvidiactl"; got != want {
		t.Errorf("device nodes of 0000:3b:00.0 = %s, want %s", got, want)
	}

	// Preparing again (a kubelet restart) is the same.
	if res := prepare(t, d, claim("uid-1", result{request: "gpus", pool: "node-a", device: "gpu-0000-af-00-0"}, result{request: "gpus", pool: "node-a", device: "gpu-0000-3b-00-0"})); res.Err != nil {
		t.Errorf("preparing again: %v", res.Err)
	}
}

func TestPrepareRefuses(t *testing.T) {
	d := newDriver(t, t.TempDir())
	if res := prepare(t, d, claim("uid-1", result{request: "r", pool: "node-a", device: "gpu-0000-3b-00-0"})); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, tt := range []struct {
		name, device, pool, want string
	}{
		{"a device another claim holds", "gpu-0000-3b-00-0", "node-a", "prepared for claim uid-1"},
		{"an unhealthy device", "gpu-0000-86-00-0", "node-a", "is Unhealthy"},
		{"a device the node keeps", "nvme-0000-d8-00-0", "node-a", "not published"},
		{"a kind not served", "nic-0000-5e-00-0", "node-a", "not published"},
		{"another node's pool", "gpu-0000-af-00-0", "node-b", `not this node's "node-a"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := prepare(t, d, claim("uid-2", result{request: "r", pool: tt.pool, device: tt.device}))
			if res.Err == nil || !strings.Contains(res.Err.Error(), tt.want) {
				t.Errorf("Prepare: %v, want an error containing %q", res.Err, tt.want)
			}
		})
	}
	if _, err := os.Stat(specPath(d.cfg.CDIDir, "uid-2")); !os.IsNotExist(err) {
		t.Errorf("a refused claim has a spec: %v", err)
	}
	unallocated := claim("uid-3")
	unallocated.Status.Allocation = nil
	if res := prepare(t, d, unallocated); res.Err == nil {
		t.Error("an unallocated claim was prepared")
	}
}

func TestUnprepareAndRestart(t *testing.T) {
	cdiDir := t.TempDir()
	d := newDriver(t, cdiDir)
	if res := prepare(t, d, claim("uid-1", result{request: "r", pool: "node-a", device: "gpu-0000-3b-00-0"})); res.Err != nil {
		t.Fatal(res.Err)
	}
	// A restarted agent reads the prepared claims back and still refuses the device.
	restarted := newDriver(t, cdiDir)
	restarted.loadPrepared()
	if res := prepare(t, restarted, claim("uid-2", result{request: "r", pool: "node-a", device: "gpu-0000-3b-00-0"})); res.Err == nil {
		t.Fatal("after a restart, a device prepared for another claim was prepared again")
	}
	out, err := restarted.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{
		{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "claim-uid-1"}, UID: "uid-1"},
		{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "never"}, UID: "uid-9"},
	})
	if err != nil || out["uid-1"] != nil || out["uid-9"] != nil {
		t.Fatalf("Unprepare: %v, %v", out, err)
	}
	if _, err := os.Stat(specPath(cdiDir, "uid-1")); !os.IsNotExist(err) {
		t.Errorf("spec of an unprepared claim: %v", err)
	}
	if res := prepare(t, restarted, claim("uid-2", result{request: "r", pool: "node-a", device: "gpu-0000-3b-00-0"})); res.Err != nil {
		t.Errorf("after Unprepare: %v", res.Err)
	}
}

// Run registers with a kubelet's registration directory and publishes the node's pool
// through the helper's slice controller; an Update changes the published slice.
func TestRunPublishes(t *testing.T) {
	d := newDriver(t, t.TempDir())
	// The kubelet makes its registration directory.
	if err := os.MkdirAll(d.cfg.RegistrarDir, 0o750); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	running := func() {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("Run ended early: %v", err)
		default:
		}
	}
	names := func() []string {
		list, err := d.cfg.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list.Items {
			if s.Spec.Driver != DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != "node-a" || s.Spec.Pool.Name != "node-a" {
				t.Errorf("slice %s: driver %s, pool %s", s.Name, s.Spec.Driver, s.Spec.Pool.Name)
			}
			for _, dev := range s.Spec.Devices {
				out = append(out, dev.Name)
			}
		}
		return out
	}
	waitFor(t, "the node's GPUs published", func() bool {
		running()
		return slices.Equal(names(), []string{"gpu-0000-3b-00-0", "gpu-0000-86-00-0", "gpu-0000-af-00-0"})
	})
	if _, err := os.Stat(filepath.Join(d.cfg.RegistrarDir, DriverName+"-reg.sock")); err != nil {
		t.Errorf("registration socket: %v", err)
	}
	d.Update([]v1alpha1.PCIDevice{{Address: "0000:3b:00.0", Kind: v1alpha1.KindGPU, Health: v1alpha1.Healthy}}, nil)
	waitFor(t, "the slice down to one GPU", func() bool { return slices.Equal(names(), []string{"gpu-0000-3b-00-0"}) })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
