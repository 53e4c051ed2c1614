//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	sextantv1 "sextant.io/sextant/api/v1alpha1"
)

// installCRDs creates or updates the chart's CRDs and waits until they serve.
func installCRDs(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(repoRoot(t), "charts", "sextant", "crds")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s (err %v)", dir, err)
	}
	crds := local.apiext.ApiextensionsV1().CustomResourceDefinitions()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(&crd); err != nil {
			t.Fatalf("decode %s: %v", f, err)
		}
		existing, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = crds.Create(ctx, &crd, metav1.CreateOptions{})
		case err == nil:
			crd.ResourceVersion = existing.ResourceVersion
			_, err = crds.Update(ctx, &crd, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("install CRD %s: %v", crd.Name, err)
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("CRD %s not established: %v", crd.Name, err)
		}
	}
}

func TestCRDsInstall(t *testing.T) {
	installCRDs(t)
	for _, name := range []string{"nodebandwidths.sextant.io", "nodetopologies.sextant.io"} {
		crd, err := local.apiext.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get CRD %s: %v", name, err)
		}
		if crd.Spec.Scope != apiextensionsv1.ClusterScoped {
			t.Errorf("CRD %s scope = %s, want Cluster", name, crd.Spec.Scope)
		}
		v := crd.Spec.Versions[0]
		if v.Subresources == nil || v.Subresources.Status == nil {
			t.Errorf("CRD %s has no status subresource", name)
		}
		if len(v.AdditionalPrinterColumns) == 0 {
			t.Errorf("CRD %s has no printer columns", name)
		}
	}
}

var nodeBandwidthGVR = sextantv1.GroupVersion.WithResource("nodebandwidths")
var nodeTopologyGVR = sextantv1.GroupVersion.WithResource("nodetopologies")

func toUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

// TestNodeBandwidthRoundTrip writes a NodeBandwidth owned by a Node, status through the
// status subresource, reads it back unchanged, and sees the garbage collector delete it
// with its Node.
func TestNodeBandwidthRoundTrip(t *testing.T) {
	installCRDs(t)
	ctx := context.Background()
	node, err := local.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-roundtrip-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	t.Cleanup(func() {
		_ = local.kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	})

	nbw := &sextantv1.NodeBandwidth{
		TypeMeta: metav1.TypeMeta{APIVersion: sextantv1.GroupVersion.String(), Kind: "NodeBandwidth"},
		ObjectMeta: metav1.ObjectMeta{
			Name: node.Name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}},
		},
	}
	client := local.dynamic.Resource(nodeBandwidthGVR)
	created, err := client.Create(ctx, toUnstructured(t, nbw), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create NodeBandwidth: %v", err)
	}
	sample := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	dir := sextantv1.DirectionBandwidth{Capacity: qty("10G"), Rate: qty("1200M"), Peak: qty("2G"), Remaining: qty("8G")}
	want := sextantv1.NodeBandwidthStatus{
		SampleTime:   &sample,
		Window:       &metav1.Duration{Duration: time.Minute},
		AgentVersion: "e2e",
		Interfaces: []sextantv1.InterfaceBandwidth{
			{Name: "eth0", Bandwidth: sextantv1.Bandwidth{Ingress: dir, Egress: sextantv1.DirectionBandwidth{Rate: qty("300M"), Peak: qty("900M")}}},
		},
		Total: &sextantv1.Bandwidth{Ingress: dir},
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(created.Object, nbw); err != nil {
		t.Fatal(err)
	}
	nbw.Status = want
	if _, err := client.UpdateStatus(ctx, toUnstructured(t, nbw), metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update NodeBandwidth status: %v", err)
	}

	got, err := client.Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get NodeBandwidth: %v", err)
	}
	var back sextantv1.NodeBandwidth
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Status.SampleTime.Equal(&sample) || back.Status.Window.Duration != time.Minute || back.Status.AgentVersion != "e2e" {
		t.Errorf("status metadata did not round-trip: %+v", back.Status)
	}
	if len(back.Status.Interfaces) != 1 || back.Status.Interfaces[0].Name != "eth0" {
		t.Fatalf("interfaces did not round-trip: %+v", back.Status.Interfaces)
	}
	in := back.Status.Interfaces[0].Ingress
	for name, pair := range map[string][2]*resource.Quantity{
		"capacity": {in.Capacity, dir.Capacity}, "rate": {in.Rate, dir.Rate},
		"peak": {in.Peak, dir.Peak}, "remaining": {in.Remaining, dir.Remaining},
	} {
		if pair[0] == nil || pair[0].Cmp(*pair[1]) != 0 {
			t.Errorf("ingress %s = %v, want %v", name, pair[0], pair[1])
		}
	}
	if out := back.Status.Interfaces[0].Egress; out.Capacity != nil || out.Remaining != nil {
		t.Errorf("unknown egress capacity came back as %v / remaining %v, want absent", out.Capacity, out.Remaining)
	}

	// The Node owns its NodeBandwidth: deleting the Node deletes it.
	if err := local.kube.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete node: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.Get(ctx, node.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("NodeBandwidth %s outlived its Node: %v", node.Name, err)
	}
}

// TestInvalidHeartbeatRejected checks the API server enforces the CRDs' validation and
// names the offending field.
func TestInvalidHeartbeatRejected(t *testing.T) {
	installCRDs(t)
	ctx := context.Background()
	cases := []struct {
		name     string
		gvrName  string
		obj      runtime.Object
		wantText []string
	}{
		{
			name:    "negative capacity",
			gvrName: "nodebandwidths",
			obj: &sextantv1.NodeBandwidth{
				TypeMeta:   metav1.TypeMeta{APIVersion: sextantv1.GroupVersion.String(), Kind: "NodeBandwidth"},
				ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-invalid-"},
				Status: sextantv1.NodeBandwidthStatus{Interfaces: []sextantv1.InterfaceBandwidth{{
					Name: "eth0",
					Bandwidth: sextantv1.Bandwidth{
						Ingress: sextantv1.DirectionBandwidth{Capacity: qty("-1G"), Rate: qty("1M")},
					},
				}}},
			},
			wantText: []string{"status.interfaces[0].ingress.capacity"},
		},
		{
			name:    "malformed PCI address",
			gvrName: "nodetopologies",
			obj: &sextantv1.NodeTopology{
				TypeMeta:   metav1.TypeMeta{APIVersion: sextantv1.GroupVersion.String(), Kind: "NodeTopology"},
				ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-invalid-"},
				Status: sextantv1.NodeTopologyStatus{Topology: sextantv1.Topology{
					PCIDevices: []sextantv1.PCIDevice{{
						Address: "3b:00.0", Class: "0x030000", Vendor: "0x10de", Device: "0x1eb8",
						Kind: sextantv1.KindGPU, NUMANode: ptr.To[int32](0), Health: sextantv1.Healthy,
					}},
				}},
			},
			wantText: []string{"status.pciDevices[0].address"},
		},
		{
			name:    "unknown device health",
			gvrName: "nodetopologies",
			obj: &sextantv1.NodeTopology{
				TypeMeta:   metav1.TypeMeta{APIVersion: sextantv1.GroupVersion.String(), Kind: "NodeTopology"},
				ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-invalid-"},
				Status: sextantv1.NodeTopologyStatus{Topology: sextantv1.Topology{
					PCIDevices: []sextantv1.PCIDevice{{
						Address: "0000:3b:00.0", Class: "0x030000", Vendor: "0x10de", Device: "0x1eb8",
						Kind: sextantv1.KindGPU, Health: "Sick",
					}},
				}},
			},
			wantText: []string{"status.pciDevices[0].health", "Healthy", "Unhealthy"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := local.dynamic.Resource(sextantv1.GroupVersion.WithResource(tc.gvrName))
			u := toUnstructured(t, tc.obj)
			status := u.Object["status"]
			delete(u.Object, "status")
			created, err := client.Create(ctx, u, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			t.Cleanup(func() { _ = client.Delete(context.Background(), created.GetName(), metav1.DeleteOptions{}) })
			created.Object["status"] = status
			_, err = client.UpdateStatus(ctx, created, metav1.UpdateOptions{})
			if err == nil {
				t.Fatal("the API server accepted an invalid status")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error is not Invalid: %v", err)
			}
			for _, want := range tc.wantText {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

// TestBusyboxPodRunsToCompletion has the default scheduler place a pod on the kubelet node from the imported
// busybox image and reads its log back through the API server.
func TestBusyboxPodRunsToCompletion(t *testing.T) {
	ns := testNamespace(t)
	ctx := context.Background()
	pod, err := local.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// The default scheduler places it on the one real node.
			NodeSelector: map[string]string{"sextant.io/local": "true"},
			Containers: []corev1.Container{{
				Name:            "hello",
				Image:           "sextant.local/busybox:dev",
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"sh", "-c", "echo hello from $(hostname); exit 0"},
			}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	waitPodPhase(t, ns, pod.Name, corev1.PodSucceeded, 2*time.Minute)
	stream, err := local.kube.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).Stream(ctx)
	if err != nil {
		t.Fatalf("get logs: %v", err)
	}
	defer stream.Close()
	out, _ := io.ReadAll(stream)
	if !strings.Contains(string(out), "hello from hello") {
		t.Errorf("log = %q, want it to contain %q", out, "hello from hello")
	}
}
