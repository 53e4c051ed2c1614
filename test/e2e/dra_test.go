//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/agent/deviceplugin"
	"sextant.io/sextant/agent/dra"
	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// pciOnlyDriver is the second DRA driver of the DRA tests: it publishes one device that
// carries only resource.kubernetes.io/pciBusID, the address of a PCI function the split
// tree puts on NUMA node 1, and prepares claims without CDI devices.
const (
	pciOnlyDriver  = "pci.e2e.sextant.io"
	pciOnlyAddress = "0000:5e:00.0"
	pciOnlyClass   = "e2e-pci"
	acceleratorDRA = "accelerator.sextant.io"
	extendedClass  = "e2e-accelerator-extended"
)

// requireCDIRuntime skips a test on a containerd without CDI (1.x): a DRA driver's
// devices reach containers through CDI.
func requireCDIRuntime(t *testing.T) {
	t.Helper()
	node, err := local.kube.CoreV1().Nodes().Get(context.Background(), local.nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimPrefix(node.Status.NodeInfo.ContainerRuntimeVersion, "containerd://")
	major, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(v, "v"), ".", 2)[0])
	if err != nil || major < 2 {
		t.Skipf("the node's runtime %q has no CDI: DRA devices need containerd 2.x (SEXTANT_CONTAINERD=2 scripts/cluster.sh up)", node.Status.NodeInfo.ContainerRuntimeVersion)
	}
}

// kubeletRoot is the local kubelet's --root-dir, where DRA drivers register.
func kubeletRoot(t *testing.T) string {
	return filepath.Dir(filepath.Dir(podResourcesSocket(t)))
}

// addPCIOnlyFunction adds the PCI function the second driver publishes to the split tree,
// on NUMA node 1, of a kind sextant serves to no pod.
func addPCIOnlyFunction(t *testing.T) func(root string) {
	return func(root string) {
		dir := filepath.Join(root, "sys/devices/pci0000:00", pciOnlyAddress)
		for name, content := range map[string]string{"class": "0x058000\n", "vendor": "0x1d0f\n", "device": "0x0001\n", "numa_node": "1\n"} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("../../../devices/pci0000:00/"+pciOnlyAddress, filepath.Join(root, "sys/bus/pci/devices", pciOnlyAddress)); err != nil {
			t.Fatal(err)
		}
	}
}

// newDRAHarness is the NUMA harness whose agent serves the accelerators through DRA
// only, beside the second driver, with a DeviceClass for each.
func newDRAHarness(t *testing.T) *numaHarness {
	t.Helper()
	requireRoot(t)
	requireCDIRuntime(t)
	root := kubeletRoot(t)
	h := newNUMAHarnessWith(t, numaHarnessOptions{tree: addPCIOnlyFunction(t), agentArgs: []string{
		"--device-plugin=false", "--dra-kinds", string(v1alpha1.KindAccelerator),
		"--dra-plugin-dir", filepath.Join(root, "plugins", dra.DriverName),
		"--dra-registrar-dir", filepath.Join(root, "plugins_registry"), "--cdi-dir", "/var/run/cdi",
	}})
	ctx := context.Background()
	// The chart ships accelerator.sextant.io (scripts/deploy.sh serves accelerators
	// through DRA); the test adds the second driver's class and one that maps
	// sextant.io/accelerator to the accelerators (KEP-5004).
	if _, err := local.kube.ResourceV1().DeviceClasses().Get(ctx, acceleratorDRA, metav1.GetOptions{}); err != nil {
		t.Fatalf("the chart's DeviceClass %s: %v", acceleratorDRA, err)
	}
	for name, driver := range map[string]string{pciOnlyClass: pciOnlyDriver, extendedClass: dra.DriverName} {
		dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}}},
		}}
		if name == extendedClass {
			dc.Spec.ExtendedResourceName = ptr.To(string(v1alpha1.KindAccelerator.ResourceName()))
		}
		_ = local.kube.ResourceV1().DeviceClasses().Delete(ctx, name, metav1.DeleteOptions{})
		if _, err := local.kube.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = local.kube.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	// The node's slices of both drivers go with the test: the chart's agent, back
	// afterwards, serves no DRA.
	t.Cleanup(func() {
		for _, d := range []string{dra.DriverName, pciOnlyDriver} {
			_ = local.kube.ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{},
				metav1.ListOptions{FieldSelector: "spec.driver=" + d})
		}
	})
	startPCIOnlyDriver(t, root)
	eventually(t, time.Minute, func() (bool, string) {
		n := publishedDevices(t)
		return len(n[dra.DriverName]) == 4 && len(n[pciOnlyDriver]) == 1, fmt.Sprintf("ResourceSlices on %s hold %v, want 4 accelerators and the second driver's device", local.nodeName, n)
	})
	return h
}

// publishedDevices are the node's devices in ResourceSlices, by driver.
func publishedDevices(t *testing.T) map[string][]string {
	t.Helper()
	list, err := local.kube.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + local.nodeName})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			out[s.Spec.Driver] = append(out[s.Spec.Driver], d.Name)
		}
	}
	return out
}

type pciOnly struct{ t *testing.T }

func (d pciOnly) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		var res kubeletplugin.PrepareResult
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == pciOnlyDriver {
				res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device})
			}
		}
		out[c.UID] = res
	}
	return out, nil
}

func (d pciOnly) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (d pciOnly) HandleError(_ context.Context, err error, msg string) {
	d.t.Logf("%s: %s: %v", pciOnlyDriver, msg, err)
}

// startPCIOnlyDriver registers the second driver with the real kubelet and publishes
// its device.
func startPCIOnlyDriver(t *testing.T, root string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dir := filepath.Join(root, "plugins", pciOnlyDriver)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	helper, err := kubeletplugin.Start(ctx, pciOnly{t},
		kubeletplugin.DriverName(pciOnlyDriver), kubeletplugin.KubeClient(local.kube), kubeletplugin.NodeName(local.nodeName),
		kubeletplugin.PluginDataDirectoryPath(dir), kubeletplugin.RegistrarDirectoryPath(filepath.Join(root, "plugins_registry")))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		helper.Stop()
		cancel()
	})
	dev := resourceapi.Device{Name: "dev0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		dra.PCIBusIDAttribute: {StringValue: ptr.To(pciOnlyAddress)},
	}}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		local.nodeName: {Slices: []resourceslice.Slice{{Devices: []resourceapi.Device{dev}}}},
	}}); err != nil {
		t.Fatal(err)
	}
}

// claim creates a ResourceClaim for count devices of class.
func (h *numaHarness) claim(name, class string, count int64) {
	h.t.Helper()
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}}
	c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "req", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}}
	if _, err := local.kube.ResourceV1().ResourceClaims(h.ns).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// claimPod is a single-numa-node pod of the harness's ranker using the claims, whose
// main container prints its accelerators and then its allowed CPUs every second.
// memory false leaves out the memory request, for a pod that may go to NUMA node 1,
// which has none in the split tree.
func (h *numaHarness) claimPod(name string, memory bool, claims ...string) *corev1.Pod {
	c := h.container("main", "echo devices=$"+deviceplugin.EnvName(v1alpha1.KindAccelerator)+"; "+loop)
	if !memory {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m")}
	}
	for _, cl := range claims {
		c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: cl})
	}
	p := h.pod(name, nil, c)
	for _, cl := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: cl, ResourceClaimName: ptr.To(cl)})
	}
	return p
}

// allocatedAddresses are the PCI addresses of the accelerators allocated to the claim,
// sorted, with the NUMA nodes the split tree puts them on.
func (h *numaHarness) allocatedAddresses(claim string) (addrs []string, numa map[string]bool) {
	h.t.Helper()
	c, err := local.kube.ResourceV1().ResourceClaims(h.ns).Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	if c.Status.Allocation == nil {
		h.t.Fatalf("claim %s is not allocated", claim)
	}
	numa = map[string]bool{}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != dra.DriverName {
			continue
		}
		for addr, n := range h.accelerators {
			if dra.DeviceName(v1alpha1.KindAccelerator, addr) == r.Device {
				addrs = append(addrs, addr)
				numa[n] = true
			}
		}
	}
	slices.Sort(addrs)
	return addrs, numa
}

// TestDRADevicesAligned: on the real node, with the agent as the DRA driver of the split
// tree's accelerators (containerd 2.x with CDI), a single-numa-node pod with a claim for
// two accelerators gets two on one NUMA node, sees exactly those, and runs on that NUMA
// node's CPUs; a pod whose claim is the second driver's device, which carries only its
// PCI address, is pinned to that device's NUMA node; a pod whose devices cannot share a
// NUMA node stays Pending with a reason naming DRA; after a kubelet restart the driver
// serves again, and the running pod keeps its devices; a pod asking for limits
// sextant.io/accelerator gets one through DRA, aligned the same way; a pod without a
// NUMA policy is pinned to the NUMA node of the accelerator DynamicResources gave it.
func TestDRADevicesAligned(t *testing.T) {
	h := newDRAHarness(t)
	ctx := context.Background()
	pods := local.kube.CoreV1().Pods(h.ns)

	// An accelerator (first fit: NUMA node 0) and the second driver's device (NUMA node
	// 1) cannot share a NUMA node.
	h.claim("spread-acc", acceleratorDRA, 1)
	h.claim("spread-pci", pciOnlyClass, 1)
	h.create(h.claimPod("spread", false, "spread-acc", "spread-pci"))
	eventually(t, 2*time.Minute, func() (bool, string) {
		p, err := pods.Get(ctx, "spread", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("spread was bound to %s: its devices sit on two NUMA nodes", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "DRA devices") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("spread's conditions %+v, want PodScheduled False naming its DRA devices", p.Status.Conditions)
	})
	if err := pods.Delete(ctx, "spread", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}

	// Two accelerators on one NUMA node, the pod's CPUs there.
	h.claim("two", acceleratorDRA, 2)
	h.create(h.claimPod("two", true, "two"))
	cpus := h.want("two")
	addrs, numa := h.allocatedAddresses("two")
	if len(addrs) != 2 || len(numa) != 1 {
		t.Fatalf("claim two holds %v on NUMA nodes %v, want two accelerators on one", addrs, numa)
	}
	p, _ := pods.Get(ctx, "two", metav1.GetOptions{})
	if !numa[p.Annotations[annotations.NUMANodes]] {
		t.Errorf("two: %s = %q, its accelerators on NUMA nodes %v", annotations.NUMANodes, p.Annotations[annotations.NUMANodes], numa)
	}
	if env, ids := h.printedDevices("two"); !slices.Equal(ids, addrs) {
		t.Errorf("two's container sees %s=%q, want exactly %v", deviceplugin.EnvName(v1alpha1.KindAccelerator), env, addrs)
	}
	h.checkFirst("two", "main", cpus)

	// The second driver's device is on NUMA node 1 by its PCI address alone.
	h.claim("pci", pciOnlyClass, 1)
	h.create(h.claimPod("pci", false, "pci"))
	if got := h.want("pci"); got != h.numaCPUs["1"] {
		t.Errorf("pci runs on CPUs %s, want NUMA node 1's %s, where its device is", got, h.numaCPUs["1"])
	}
	p, _ = pods.Get(ctx, "pci", metav1.GetOptions{})
	if v := p.Annotations[annotations.NUMANodes]; v != "1" {
		t.Errorf("pci: %s = %q, want \"1\"", annotations.NUMANodes, v)
	}

	// A kubelet restart: the driver is registered again and prepares a new claim; the
	// running pod keeps its devices.
	restartKubelet(t)
	h.claim("after", acceleratorDRA, 2)
	h.create(h.claimPod("after", false, "after"))
	h.want("after")
	after, _ := h.allocatedAddresses("after")
	if env, ids := h.printedDevices("after"); !slices.Equal(ids, after) || len(after) != 2 {
		t.Errorf("after the kubelet restart, after sees %q, want exactly %v", env, after)
	}
	if slices.ContainsFunc(after, func(a string) bool { return slices.Contains(addrs, a) }) {
		t.Errorf("after got %v, which overlaps two's %v", after, addrs)
	}
	if kept, _ := h.allocatedAddresses("two"); !slices.Equal(kept, addrs) {
		t.Errorf("after the kubelet restart two's claim holds %v, want %v", kept, addrs)
	}
	h.checkNow("two", "main", cpus, "after a kubelet restart")

	// An old-style pod asking for limits sextant.io/accelerator gets it through DRA: the
	// node advertises none (no device plugin serves the kind), a DeviceClass maps it, and
	// the scheduler makes the pod a claim for it. "two" and "after" hold all four
	// accelerators: "after" goes first.
	if err := pods.Delete(ctx, "after", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	// kube-controller-manager's resourceclaim controller deallocates a claim no pod uses.
	eventually(t, 2*time.Minute, func() (bool, string) {
		c, err := local.kube.ResourceV1().ResourceClaims(h.ns).Get(ctx, "after", metav1.GetOptions{})
		return err == nil && c.Status.Allocation == nil, fmt.Sprintf("claim after is still allocated (%v)", err)
	})
	old := h.claimPod("old", false)
	old.Spec.Containers[0].Resources.Limits = corev1.ResourceList{v1alpha1.KindAccelerator.ResourceName(): resource.MustParse("1")}
	old.Spec.Containers[0].Resources.Requests[v1alpha1.KindAccelerator.ResourceName()] = resource.MustParse("1")
	h.create(old)
	oldCPUs := h.want("old")
	p, _ = pods.Get(ctx, "old", metav1.GetOptions{})
	var extClaim string
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			extClaim = *s.ResourceClaimName
		}
	}
	if p.Status.ExtendedResourceClaimStatus != nil {
		extClaim = p.Status.ExtendedResourceClaimStatus.ResourceClaimName
	}
	if extClaim == "" {
		t.Fatalf("old has no claim for its extended resource: status %+v", p.Status)
	}
	oldAddrs, oldNUMA := h.allocatedAddresses(extClaim)
	if len(oldAddrs) != 1 || h.numaCPUs[firstKey(oldNUMA)] != oldCPUs {
		t.Errorf("old got %v on NUMA nodes %v and runs on CPUs %s", oldAddrs, oldNUMA, oldCPUs)
	}
	if env, ids := h.printedDevices("old"); !slices.Equal(ids, oldAddrs) {
		t.Errorf("old's container sees %q, want exactly %v", env, oldAddrs)
	}
	if _, ok := p.Annotations[annotations.DevicesAllocated]; ok {
		t.Errorf("the ranker wrote %s on old, whose accelerator DynamicResources allocates", annotations.DevicesAllocated)
	}

	// A pod without a NUMA policy is judged by its CPUs and memory alone on every node;
	// Reserve reads where DynamicResources put its accelerator (the last one free) and
	// the pod is pinned to that accelerator's NUMA node, and runs there.
	h.claim("nopolicy", acceleratorDRA, 1)
	nopolicy := h.claimPod("nopolicy", false, "nopolicy")
	delete(nopolicy.Annotations, annotations.NUMAPolicy)
	h.create(nopolicy)
	npCPUs := h.want("nopolicy")
	npAddrs, npNUMA := h.allocatedAddresses("nopolicy")
	p, _ = pods.Get(ctx, "nopolicy", metav1.GetOptions{})
	if len(npAddrs) != 1 || p.Annotations[annotations.NUMANodes] != firstKey(npNUMA) {
		t.Errorf("nopolicy got %v on NUMA nodes %v, and %s = %q", npAddrs, npNUMA, annotations.NUMANodes, p.Annotations[annotations.NUMANodes])
	}
	if got := h.prints("nopolicy", "main", 1)[0].cpus; got != npCPUs {
		t.Errorf("nopolicy first ran on CPUs %q, want %q, its accelerator's NUMA node's", got, npCPUs)
	}

	// Pods go while the agent still runs, so that their claims are unprepared and their
	// CDI specs removed.
	for _, name := range []string{"two", "pci", "old", "nopolicy"} {
		_ = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	eventually(t, 2*time.Minute, func() (bool, string) {
		list, err := pods.List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, fmt.Sprintf("pods left in %s: %v", h.ns, err)
	})
	eventually(t, time.Minute, func() (bool, string) {
		specs, _ := filepath.Glob("/var/run/cdi/sextant.io-claim_*.json")
		return len(specs) == 0, fmt.Sprintf("CDI specs of unprepared claims left: %v", specs)
	})
}

// firstKey is the only key of a one-element set.
func firstKey(m map[string]bool) string {
	for k := range m {
		return k
	}
	return ""
}
