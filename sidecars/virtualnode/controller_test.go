package virtualnode

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/sidecarrules"
	"sextant.io/sextant/sidecars/webhook"
)

const exitImage = "sextant.local/exit0:test"

func preparedPod(name, node string, policy corev1.RestartPolicy, mainExit *int32) *corev1.Pod {
	key := annotations.SidecarCommand("proxy")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{annotations.SidecarPrepared: "true"},
			Annotations: map[string]string{key: `["sleep","3600"]`}},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: policy,
			InitContainers: []corev1.Container{{Name: "proxy", Image: "busybox", Command: []string{webhook.WrapperPath},
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Env: []corev1.EnvVar{{Name: sidecarrules.EnvSidecar, Value: "true"}}}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "proxy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	if mainExit != nil {
		pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: *mainExit}}
	}
	return pod
}

func TestSwapOnVirtualNodesOnly(t *testing.T) {
	virtual := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vk", Labels: map[string]string{NodeTypeLabel: NodeTypeVirtual}}}
	tainted := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vk2"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: ProviderTaint, Value: "aci", Effect: corev1.TaintEffectNoSchedule}}}}
	real := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real"}}
	pods := []*corev1.Pod{
		preparedPod("done", "vk", corev1.RestartPolicyNever, ptr.To[int32](0)),
		preparedPod("done-tainted", "vk2", corev1.RestartPolicyNever, ptr.To[int32](1)),
		preparedPod("running", "vk", corev1.RestartPolicyNever, nil),
		preparedPod("failed-onfailure", "vk", corev1.RestartPolicyOnFailure, ptr.To[int32](1)),
		preparedPod("on-real-node", "real", corev1.RestartPolicyNever, ptr.To[int32](0)),
	}
	kube := fake.NewClientset(virtual, tainted, real)
	for _, p := range pods {
		if _, err := kube.CoreV1().Pods("ns").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	metrics := NewMetrics(nil)
	c, err := New(Config{ExitImage: exitImage, Metrics: metrics}, kube, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	get := func(name string) *corev1.Pod {
		p, err := kube.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, name := range []string{"done", "done-tainted"} {
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return get(name).Spec.InitContainers[0].Image == exitImage, nil
		})
		if err != nil {
			t.Fatalf("%s: sidecar not swapped", name)
		}
		if got := get(name).Annotations[annotations.SidecarCommand("proxy")]; got != `["/exit0"]` {
			t.Errorf("%s: command annotation %q, want the exit command", name, got)
		}
		if img := get(name).Spec.Containers[0].Image; img != "busybox" {
			t.Errorf("%s: main container's image changed to %s", name, img)
		}
	}
	// The event and the metric follow the update, on the worker.
	var events int
	var swaps float64
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		evs, err := kube.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		events, swaps = len(evs.Items), testutil.ToFloat64(metrics.swaps.WithLabelValues(resultSwapped))
		return events >= 2 && swaps >= 2, nil
	})
	if err != nil || events != 2 || swaps != 2 {
		t.Errorf("%d events, want one per swapped pod; sextant_virtual_node_swaps_total{result=swapped} = %v, want 2 (one sidecar in each of two pods)", events, swaps)
	}
	// Checked after the swaps' events: the pods were all listed before the first swap.
	for _, name := range []string{"running", "failed-onfailure", "on-real-node"} {
		if img := get(name).Spec.InitContainers[0].Image; img != "busybox" {
			t.Errorf("%s: swapped to %s, want untouched", name, img)
		}
	}
}

func TestSwapOnlyWhatTheExitImageCanRun(t *testing.T) {
	wrapped := preparedPod("p", "vk", corev1.RestartPolicyNever, ptr.To[int32](0))
	entrypoint := corev1.Container{Name: "entry", Image: "envoy"}
	ownCommand := corev1.Container{Name: "own", Image: "busybox", Command: []string{"sleep", "3600"}}
	wrapped.Spec.InitContainers = append(wrapped.Spec.InitContainers, entrypoint, ownCommand)
	got, err := swap(wrapped, []string{"proxy", "entry", "own"}, exitImage, []string{"/exit0"})
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	for _, c := range got.pod.Spec.InitContainers {
		images[c.Name] = c.Image
	}
	for name, want := range map[string]string{"proxy": exitImage, "entry": exitImage, "own": "busybox"} {
		if images[name] != want {
			t.Errorf("%s: image %s, want %s", name, images[name], want)
		}
	}
	if len(got.names) != 2 || len(got.skipped) != 1 || got.skipped[0] != "own" {
		t.Errorf("swapped %v, skipped %v; want proxy and entry swapped, own skipped", got.names, got.skipped)
	}
	if wrapped.Spec.InitContainers[0].Image != "busybox" {
		t.Error("swap changed its input")
	}
}

// Whether a sidecar is wrapped is in its command, not in the annotation, which the pod's
// author may set on a sidecar that runs its own command: swapped, that one would fail to
// start in the exit image.
func TestSwapTellsWrappedByCommand(t *testing.T) {
	key := annotations.SidecarCommand("proxy")
	cases := []struct {
		name           string
		command        []string
		annotation     string // none if empty
		wantImage      string
		wantAnnotation string
	}{
		{"wrapped", []string{webhook.WrapperPath}, `["sleep","3600"]`, exitImage, `["/exit0"]`},
		{"wrapped, annotation removed since", []string{webhook.WrapperPath}, "", exitImage, `["/exit0"]`},
		{"own command, annotation set by the author", []string{"sleep", "3600"}, `["sleep","3600"]`, "busybox", `["sleep","3600"]`},
		{"no command, annotation set by the author", nil, `["/usr/local/bin/envoy"]`, exitImage, `["/usr/local/bin/envoy"]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := preparedPod("p", "vk", corev1.RestartPolicyOnFailure, ptr.To[int32](0))
			pod.Annotations = nil
			if c.annotation != "" {
				pod.Annotations = map[string]string{key: c.annotation}
			}
			pod.Spec.InitContainers[0].Command = c.command
			got, err := swap(pod, []string{"proxy"}, exitImage, []string{"/exit0"})
			if err != nil {
				t.Fatal(err)
			}
			if img := got.pod.Spec.InitContainers[0].Image; img != c.wantImage {
				t.Errorf("image %s, want %s", img, c.wantImage)
			}
			if a := got.pod.Annotations[key]; a != c.wantAnnotation {
				t.Errorf("annotation %q, want %q", a, c.wantAnnotation)
			}
		})
	}
}
