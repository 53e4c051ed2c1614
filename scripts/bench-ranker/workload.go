package main

import (
	"fmt"
	"math/rand"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// assignNetworks has every shape.otherNetworkEvery-th pod that asks for bandwidth name
// the shape's other networks in turn; it draws nothing, so the pods are otherwise the
// same in every shape.
func assignNetworks(pods []podSpec, shape nodeShape) {
	if shape.otherNetworkEvery == 0 || len(shape.networks) < 2 {
		return
	}
	asking, other := 0, 0
	for i := range pods {
		p := &pods[i]
		if p.required == [2]int64{} && p.expected == [2]int64{} {
			continue
		}
		if asking++; asking%shape.otherNetworkEvery == 0 {
			p.network = 1 + other%(len(shape.networks)-1)
			other++
		}
	}
}

// span is a range of a resource drawn uniformly in steps of unit: lo*unit to hi*unit.
type span struct{ lo, hi, unit int64 }

// podClass is one kind of pod of the workload: its share of the pods and what each
// asks for. A zero span asks for none of that resource.
type podClass struct {
	kind     string
	share    float64
	gpus     span
	milliCPU span
	memory   span
}

// podClasses is the pod mix, in the order a draw picks them; a GPU pod asks for 1 to
// gpuMax GPUs.
func podClasses(gpuMax int64) []podClass {
	return []podClass{
		// Accelerator jobs.
		{kind: "gpu", share: 0.10, gpus: span{1, gpuMax, 1}, milliCPU: span{1, 8, 1000}, memory: span{2, 16, 1 << 30}},
		// CPU- and memory-heavy services, where NUMA matters.
		{kind: "numa", share: 0.30, milliCPU: span{2, 24, 1000}, memory: span{4, 48, 1 << 30}},
		// The long tail of small pods.
		{kind: "small", share: 0.60, milliCPU: span{1, 5, 100}, memory: span{1, 4, 128 << 20}},
	}
}

// makeWorkload returns the seeded pod mix of podClasses; the same seed gives every
// scheduler the same pods in the same order. gpuMax changes only the GPU pods' GPU
// count: every other draw, and so every other pod, is the same whatever it is.
func makeWorkload(seed int64, n int, gpuMax int64) []podSpec {
	rng := rand.New(rand.NewSource(seed))
	between := func(lo, hi int64) int64 { return lo + rng.Int63n(hi-lo+1) }
	draw := func(s span) int64 {
		if s.unit == 0 {
			return 0
		}
		return between(s.lo, s.hi) * s.unit
	}
	classes := podClasses(gpuMax)
	out := make([]podSpec, n)
	for i := range out {
		var p podSpec
		r, c, cum := rng.Float64(), classes[len(classes)-1], 0.0
		for _, cl := range classes {
			if cum += cl.share; r < cum {
				c = cl
				break
			}
		}
		p.kind = c.kind
		p.gpus = draw(c.gpus)
		p.milliCPU = draw(c.milliCPU)
		p.memory = draw(c.memory)
		if rng.Float64() < 0.5 {
			// Which directions: ingress only, egress only, or both.
			dirs := [][]int{{0}, {1}, {0, 1}}[rng.Intn(3)]
			for _, d := range dirs {
				req := between(1, 40) * 50_000_000 // 50M..2G
				switch r := rng.Float64(); {
				case r < 0.5: // required and expected
					p.required[d] = req
					p.expected[d] = req + between(0, req/100_000_000)*50_000_000
				case r < 0.8: // required only
					p.required[d] = req
				default: // expected only: a preference, never a violation
					p.expected[d] = req
				}
			}
			p.mostHeadroom = rng.Float64() < 0.3
		}
		out[i] = p
	}
	return out
}

func (b *bench) pod(i int, sched string) *corev1.Pod {
	p := b.workload[i]
	ann := map[string]string{}
	qty := func(v int64) string { return resource.NewQuantity(v, resource.DecimalSI).String() }
	for d, names := range [2][2]string{{annIngressRequired, annIngressExpected}, {annEgressRequired, annEgressExpected}} {
		if p.required[d] > 0 {
			ann[names[0]] = qty(p.required[d])
		}
		if p.expected[d] > 0 {
			ann[names[1]] = qty(p.expected[d])
		}
	}
	if p.mostHeadroom {
		ann[annStrategy] = "most-headroom"
	}
	if p.network > 0 {
		ann[annNetwork] = b.shape.networks[p.network]
	}
	req := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(p.milliCPU, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(p.memory, resource.BinarySI),
	}
	if p.gpus > 0 {
		req[resourceGPU] = *resource.NewQuantity(p.gpus, resource.DecimalSI)
	}
	noToken := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("%s-%05d", sched, i),
			Namespace:   b.ns,
			Labels:      map[string]string{labelBench: b.runID, labelScheduler: sched, "bench-kind": p.kind},
			Annotations: ann,
		},
		Spec: corev1.PodSpec{
			SchedulerName: "bench-" + sched,
			NodeSelector:  map[string]string{labelBench: b.runID},
			// The node lifecycle controller taints kubelet-less nodes unreachable (both
			// NoSchedule and NoExecute); the pods must neither be kept off nor evicted.
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			AutomountServiceAccountToken: &noToken,
			Containers: []corev1.Container{{
				Name: "main", Image: image, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{Requests: req, Limits: limitsFor(req)},
			}},
		},
	}
	if b.shape.dra && p.gpus > 0 {
		useClaim(pod, claimName(sched, i))
	}
	return pod
}

// limitsFor sets limits only for extended resources, which require limit == request.
func limitsFor(req corev1.ResourceList) corev1.ResourceList {
	if q, ok := req[resourceGPU]; ok {
		return corev1.ResourceList{resourceGPU: q}
	}
	return nil
}
