package deviceplugin

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/api/annotations"
)

const (
	gpuRes = corev1.ResourceName("sextant.io/gpu")
	nicRes = corev1.ResourceName("sextant.io/nic")
	devA   = "0000:3b:00.0"
	devB   = "0000:3c:00.0"
	devC   = "0000:af:00.0"
	devD   = "0000:b0:00.0"
)

var (
	epoch    = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	numaABCD = map[string]int64{devA: 0, devB: 0, devC: 1, devD: 1}
)

func ctr(name string, gpus int64) corev1.Container {
	c := corev1.Container{Name: name}
	if gpus > 0 {
		q := *resource.NewQuantity(gpus, resource.DecimalSI)
		c.Resources.Requests = corev1.ResourceList{gpuRes: q}
		c.Resources.Limits = corev1.ResourceList{gpuRes: q}
	}
	return c
}

// mkPod is a pod bound to the node, created minute minutes after epoch, annotated with
// the devices given as "sextant.io/gpu=A,B;sextant.io/nic=C" ("" for none).
func mkPod(name string, minute int, devices string, containers ...corev1.Container) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(minute) * time.Minute))},
		Spec:   corev1.PodSpec{NodeName: "node-1", Containers: containers},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if devices != "" {
		alloc := annotations.Allocation{}
		for part := range strings.SplitSeq(devices, ";") {
			res, ids, _ := strings.Cut(part, "=")
			alloc[corev1.ResourceName(res)] = strings.Split(ids, ",")
		}
		p.Annotations = map[string]string{annotations.DevicesAllocated: alloc.String()}
	}
	return p
}

func with(p *corev1.Pod, f func(*corev1.Pod)) *corev1.Pod { f(p); return p }

// admits is a kubelet that is admitting the named pods, of those asked about.
func admits(names ...string) AdmittingFunc {
	return func(cands []*corev1.Pod) ([]*corev1.Pod, bool) {
		var out []*corev1.Pod
		for _, p := range cands {
			if slices.Contains(names, p.Name) {
				out = append(out, p)
			}
		}
		return out, true
	}
}

func TestPrefer(t *testing.T) {
	all := []string{devA, devB, devC, devD}
	p1 := mkPod("p1", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2))
	p2 := mkPod("p2", 1, "sextant.io/gpu="+devC+","+devD, ctr("main", 2))
	plain2 := mkPod("plain", 2, "", ctr("main", 2)) // no devices chosen
	tests := []struct {
		name      string
		pods      []*corev1.Pod
		req       PreferenceRequest
		admitting AdmittingFunc
		want      string // IDs, comma-separated
		outcome   string
		pod       string // the pod the IDs come from
	}{
		{name: "one pod fits",
			pods: []*corev1.Pod{p1},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			want: devA + "," + devB, outcome: OutcomeAnnotation, pod: "p1"},
		{name: "two pods of the same size pending: the oldest first",
			pods: []*corev1.Pod{p2, p1},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			want: devA + "," + devB, outcome: OutcomeTie, pod: "p1"},
		{name: "two pods of the same size pending, the first one admitted: the second fits alone",
			pods: []*corev1.Pod{p1, p2},
			req:  PreferenceRequest{Resource: gpuRes, Available: []string{devC, devD}, Size: 2},
			want: devC + "," + devD, outcome: OutcomeAnnotation, pod: "p2"},
		{name: "two pods of the same size pending, the kubelet names the one it admits",
			pods:      []*corev1.Pod{p1, p2},
			req:       PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			admitting: admits("p2"),
			want:      devC + "," + devD, outcome: OutcomeKubelet, pod: "p2"},
		{name: "the kubelet cannot tell them apart either",
			pods:      []*corev1.Pod{p2, p1},
			req:       PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			admitting: admits("p1", "p2"),
			want:      devA + "," + devB, outcome: OutcomeTie, pod: "p1"},
		{name: "the kubelet does not answer: the oldest",
			pods:      []*corev1.Pod{p2, p1},
			req:       PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			admitting: func([]*corev1.Pod) ([]*corev1.Pod, bool) { return nil, false },
			want:      devA + "," + devB, outcome: OutcomeTie, pod: "p1"},
		{name: "one pod fits and the kubelet admits it",
			pods:      []*corev1.Pod{p1},
			req:       PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			admitting: admits("p1"),
			want:      devA + "," + devB, outcome: OutcomeAnnotation, pod: "p1"},
		{name: "one pod fits but the kubelet admits another: the fallback keeps off its devices",
			pods:      []*corev1.Pod{p1},
			req:       PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			admitting: admits("plain"),
			want:      devC + "," + devD, outcome: OutcomeFallback},
		{name: "the kubelet admits another and only the candidates' devices are left: the fallback takes them",
			pods:      []*corev1.Pod{p1},
			req:       PreferenceRequest{Resource: gpuRes, Available: []string{devA, devB, devC}, Size: 2},
			admitting: admits("plain"),
			want:      devA + "," + devB, outcome: OutcomeFallback},
		{name: "the kubelet admits another: only its must-include devices may overlap",
			pods:      []*corev1.Pod{mkPod("p3", 0, "sextant.io/gpu="+devB+","+devC, ctr("main", 2))},
			req:       PreferenceRequest{Resource: gpuRes, Available: all, MustInclude: []string{devB}, Size: 2},
			admitting: admits("plain"),
			want:      devB + "," + devA, outcome: OutcomeFallback},
		{name: "same creation time: namespace/name decides",
			pods: []*corev1.Pod{mkPod("zz", 0, "sextant.io/gpu="+devC+","+devD, ctr("main", 2)), mkPod("aa", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2))},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			want: devA + "," + devB, outcome: OutcomeTie, pod: "aa"},
		{name: "preferred IDs no longer available: fall back, on one NUMA node",
			pods: []*corev1.Pod{p1},
			req:  PreferenceRequest{Resource: gpuRes, Available: []string{devB, devC, devD}, Size: 2},
			want: devC + "," + devD, outcome: OutcomeFallback},
		{name: "another size: kept off the pending pod's devices",
			pods: []*corev1.Pod{p1},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 1},
			want: devC, outcome: OutcomeFallback},
		{name: "another size, the kubelet admits a plain pod: kept off the pending pod's devices",
			pods:      []*corev1.Pod{p1, mkPod("plain", 1, "", ctr("main", 1))},
			req:       PreferenceRequest{Resource: gpuRes, Available: all, Size: 1},
			admitting: admits("plain"),
			want:      devC, outcome: OutcomeFallback},
		{name: "another size, only the pending pod's devices left: the fallback takes them",
			pods: []*corev1.Pod{p1},
			req:  PreferenceRequest{Resource: gpuRes, Available: []string{devA, devB}, Size: 1},
			want: devA, outcome: OutcomeFallback},
		{name: "the kubelet admits a plain pod: kept off the candidate's and the other size's devices",
			pods:      []*corev1.Pod{p1, mkPod("p3", 2, "sextant.io/gpu="+devC, ctr("main", 1))},
			req:       PreferenceRequest{Resource: gpuRes, Available: all, Size: 1},
			admitting: admits("plain"),
			want:      devD, outcome: OutcomeFallback},
		{name: "another size, a started pod holds nothing back",
			pods: []*corev1.Pod{with(mkPod("run", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2)), func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			})},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 1},
			want: devA, outcome: OutcomeFallback},
		{name: "another size, a pending pod's devices the container must include stay",
			pods: []*corev1.Pod{p1},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, MustInclude: []string{devB}, Size: 3},
			want: devB + "," + devC + "," + devD, outcome: OutcomeFallback},
		{name: "another resource",
			pods: []*corev1.Pod{mkPod("n", 0, "sextant.io/nic="+devA, ctr("main", 1))},
			req:  PreferenceRequest{Resource: gpuRes, Available: []string{devC, devD}, Size: 1},
			want: devC, outcome: OutcomeFallback},
		{name: "no annotation",
			pods: []*corev1.Pod{mkPod("plain", 0, "", ctr("main", 2))},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			want: devA + "," + devB, outcome: OutcomeFallback},
		{name: "malformed annotation",
			pods: []*corev1.Pod{with(mkPod("bad", 0, "", ctr("main", 2)), func(p *corev1.Pod) {
				p.Annotations = map[string]string{annotations.DevicesAllocated: `{"sextant.io/gpu":["0000:af:00.0","nope"]}`}
			})},
			req:  PreferenceRequest{Resource: gpuRes, Available: []string{devC, devD}, Size: 2},
			want: devC + "," + devD, outcome: OutcomeFallback},
		{name: "a running pod is not being admitted",
			pods: []*corev1.Pod{with(mkPod("run", 0, "sextant.io/gpu="+devC+","+devD, ctr("main", 2)), func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			})},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			want: devA + "," + devB, outcome: OutcomeFallback},
		{name: "a container waiting to restart ran before",
			pods: []*corev1.Pod{with(mkPod("crash", 0, "sextant.io/gpu="+devC+","+devD, ctr("main", 2)), func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main",
					State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
			})},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			want: devA + "," + devB, outcome: OutcomeFallback},
		{name: "a waiting container that never ran still counts",
			pods: []*corev1.Pod{with(mkPod("wait", 0, "sextant.io/gpu="+devC+","+devD, ctr("main", 2)), func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
			})},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			want: devC + "," + devD, outcome: OutcomeAnnotation, pod: "wait"},
		{name: "deleted, finished and unbound pods are not admitted",
			pods: []*corev1.Pod{
				with(mkPod("del", 0, "sextant.io/gpu="+devC+","+devD, ctr("main", 2)), func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }),
				with(mkPod("done", 0, "sextant.io/gpu="+devC+","+devD, ctr("main", 2)), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
				with(mkPod("unbound", 0, "sextant.io/gpu="+devC+","+devD, ctr("main", 2)), func(p *corev1.Pod) { p.Spec.NodeName = "" }),
			},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 2},
			want: devA + "," + devB, outcome: OutcomeFallback},
		{name: "an init container's devices must be included",
			pods: []*corev1.Pod{with(mkPod("init", 0, "sextant.io/gpu="+devC+","+devD, ctr("main", 2)), func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{ctr("prep", 1)}
			})},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, MustInclude: []string{devD}, Size: 2},
			want: devD + "," + devC, outcome: OutcomeAnnotation, pod: "init"},
		{name: "must-include outside the annotation: fall back beside it, on its NUMA node",
			pods: []*corev1.Pod{p1},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, MustInclude: []string{devC}, Size: 2},
			want: devC + "," + devD, outcome: OutcomeFallback},
		{name: "a request set only as a limit",
			pods: []*corev1.Pod{mkPod("lim", 0, "sextant.io/gpu="+devC, corev1.Container{Name: "main",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gpuRes: resource.MustParse("1")}}})},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 1},
			want: devC, outcome: OutcomeAnnotation, pod: "lim"},
		{name: "a fallback is kept off devices in use",
			pods: []*corev1.Pod{plain2},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, InUse: []string{devA}, Size: 2},
			want: devC + "," + devD, outcome: OutcomeFallback},
		{name: "a fallback is kept off devices in use before those of pending pods",
			pods: []*corev1.Pod{plain2, mkPod("one", 0, "sextant.io/gpu="+devC, ctr("main", 1))},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, InUse: []string{devA, devB}, Size: 2},
			want: devC + "," + devD, outcome: OutcomeFallback},
		{name: "a fallback is kept off devices in use and those of pending pods where others are available",
			pods: []*corev1.Pod{p2},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, InUse: []string{devA}, Size: 1},
			want: devB, outcome: OutcomeFallback},
		{name: "a fallback takes devices in use when nothing else is available",
			pods: []*corev1.Pod{plain2},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, InUse: []string{devA, devB, devC}, Size: 2},
			want: devA + "," + devB, outcome: OutcomeFallback},
		{name: "devices in use the container must include stay",
			pods: []*corev1.Pod{plain2},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, MustInclude: []string{devB}, InUse: []string{devA, devB}, Size: 2},
			want: devB + "," + devC, outcome: OutcomeFallback},
		{name: "no pod pending: a running container admitted again is offered the devices in use",
			pods: []*corev1.Pod{with(mkPod("run", 0, "", ctr("main", 1)), func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			})},
			req:  PreferenceRequest{Resource: gpuRes, Available: all, InUse: []string{devC}, Size: 1},
			want: devC, outcome: OutcomeFallback},
		{name: "no pod pending, too few devices in use: the usual fallback",
			pods: nil,
			req:  PreferenceRequest{Resource: gpuRes, Available: all, InUse: []string{devC}, Size: 2},
			want: devA + "," + devB, outcome: OutcomeFallback},
		{name: "fallback without NUMA data: address order",
			pods: nil,
			req:  PreferenceRequest{Resource: gpuRes, Available: []string{"0000:03:00.0", "0000:01:00.0", "0000:02:00.0"}, Size: 2},
			want: "0000:01:00.0,0000:02:00.0", outcome: OutcomeFallback},
		{name: "fallback with no NUMA node holding them all: address order",
			pods: nil,
			req:  PreferenceRequest{Resource: gpuRes, Available: all, Size: 3},
			want: devA + "," + devB + "," + devC, outcome: OutcomeFallback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Prefer(tt.pods, tt.req, numaABCD, tt.admitting)
			if ids := strings.Join(got.IDs, ","); ids != tt.want || got.Outcome != tt.outcome {
				t.Errorf("Prefer = %s (%s), want %s (%s)", ids, got.Outcome, tt.want, tt.outcome)
			}
			name := ""
			if got.Pod != nil {
				name = got.Pod.Name
			}
			if name != tt.pod {
				t.Errorf("pod = %q, want %q", name, tt.pod)
			}
		})
	}
}

// A pod whose containers each ask for one device gets its listed devices one
// container at a time, as the kubelet asks.
func TestPreferMultiContainer(t *testing.T) {
	p := mkPod("two", 0, "sextant.io/gpu="+devB+","+devC, ctr("a", 1), ctr("b", 1))
	first := Prefer([]*corev1.Pod{p}, PreferenceRequest{Resource: gpuRes, Available: []string{devA, devB, devC, devD}, Size: 1}, numaABCD, nil)
	if strings.Join(first.IDs, ",") != devB || first.Outcome != OutcomeAnnotation {
		t.Fatalf("first container: %v (%s), want %s", first.IDs, first.Outcome, devB)
	}
	second := Prefer([]*corev1.Pod{p}, PreferenceRequest{Resource: gpuRes, Available: []string{devA, devC, devD}, Size: 1}, numaABCD, nil)
	if strings.Join(second.IDs, ",") != devC || second.Outcome != OutcomeAnnotation {
		t.Fatalf("second container: %v (%s), want %s", second.IDs, second.Outcome, devC)
	}
}

// Two pods pending at once, asked about in the kubelet's order: whichever the kubelet
// admits first, the two sets are disjoint and each pod that is asked about while alone
// gets its own.
func TestPreferSequence(t *testing.T) {
	p1 := mkPod("p1", 0, "sextant.io/gpu="+devA+","+devB, ctr("main", 2))
	p2 := mkPod("p2", 1, "sextant.io/gpu="+devC+","+devD, ctr("main", 2))
	avail := []string{devA, devB, devC, devD}
	first := Prefer([]*corev1.Pod{p1, p2}, PreferenceRequest{Resource: gpuRes, Available: avail, Size: 2}, numaABCD, nil)
	var rest []string
	for _, id := range avail {
		if !strings.Contains(strings.Join(first.IDs, ","), id) {
			rest = append(rest, id)
		}
	}
	second := Prefer([]*corev1.Pod{p1, p2}, PreferenceRequest{Resource: gpuRes, Available: rest, Size: 2}, numaABCD, nil)
	if strings.Join(first.IDs, ",") != devA+","+devB || strings.Join(second.IDs, ",") != devC+","+devD {
		t.Errorf("first %v, second %v; want p1's then p2's", first.IDs, second.IDs)
	}
	if second.Outcome != OutcomeAnnotation || second.Pod != p2 {
		t.Errorf("second: %s from %v, want p2's annotation", second.Outcome, second.Pod)
	}
}

// A pod without an annotation admitted while a ranker-placed pod of another size waits
// (routine after a kubelet restart) is kept off the waiting pod's devices, with or
// without the kubelet's PodResources, and the waiting pod then finds them.
func TestPreferKeepsOffPendingPodsOfOtherSizes(t *testing.T) {
	all := []string{devA, devB, devC, devD}
	chosen := mkPod("chosen", 1, "sextant.io/gpu="+devA+","+devB, ctr("main", 2))
	plain := mkPod("plain", 0, "", ctr("main", 1))
	pods := []*corev1.Pod{chosen, plain}
	for _, tc := range []struct {
		name      string
		admitting AdmittingFunc
	}{{"the kubelet admits the plain pod", admits("plain")}, {"without PodResources", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			first := Prefer(pods, PreferenceRequest{Resource: gpuRes, Available: all, Size: 1}, numaABCD, tc.admitting)
			if slices.Contains(first.IDs, devA) || slices.Contains(first.IDs, devB) || first.Outcome != OutcomeFallback {
				t.Fatalf("plain pod offered %v (%s), a device the ranker chose for pending pod chosen (%s,%s), though %s,%s are free",
					first.IDs, first.Outcome, devA, devB, devC, devD)
			}
			rest := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return slices.Contains(first.IDs, id) })
			second := Prefer(pods, PreferenceRequest{Resource: gpuRes, Available: rest, Size: 2}, numaABCD, nil)
			if strings.Join(second.IDs, ",") != devA+","+devB || second.Pod != chosen {
				t.Errorf("chosen pod then offered %v (%s), want its %s,%s", second.IDs, second.Outcome, devA, devB)
			}
		})
	}
}
