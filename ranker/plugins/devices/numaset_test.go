package devices

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/numa"
)

// TestOneNUMASet: NUMAAware chooses one set of NUMA nodes that holds the pod's CPUs,
// memory and devices together (the smallest, then the closest, then the lowest IDs), and
// DeviceAware picks the devices inside it; the answer is the same whichever plugin the
// framework calls first.
func TestOneNUMASet(t *testing.T) {
	gpus := func(n int64) map[v1alpha1.DeviceKind]int64 { return map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: n} }
	single := map[string]string{annotations.NUMAPolicy: string(annotations.PolicySingleNUMANode)}
	// eight NUMA nodes of 2 CPUs and one GPU each; 0, 1 and 5 are close to each other.
	eight := topology("n", 8, 2,
		gpu("0000:10:00.0", 0), gpu("0000:11:00.0", 1), gpu("0000:12:00.0", 2), gpu("0000:13:00.0", 3),
		gpu("0000:14:00.0", 4), gpu("0000:15:00.0", 5), gpu("0000:16:00.0", 6), gpu("0000:17:00.0", 7))
	for i := range eight.Status.NUMANodes {
		for j := range eight.Status.NUMANodes[i].Distances {
			close := (i == 0 || i == 1 || i == 5) && (j == 0 || j == 1 || j == 5)
			switch {
			case i == j:
				eight.Status.NUMANodes[i].Distances[j] = 10
			case close:
				eight.Status.NUMANodes[i].Distances[j] = 11
			case j == i+1 || i == j+1:
				eight.Status.NUMANodes[i].Distances[j] = 16
			}
		}
	}
	// NUMA node 1 has memory and a GPU but no CPUs.
	cpuless := topology("n", 2, 4, gpu("0000:90:00.0", 0), gpu("0000:10:00.0", 1))
	cpuless.Status.NUMANodes[1].CPUs = nil
	// NUMA nodes listed out of ID order.
	unsorted := topology("n", 2, 4, gpu("0000:3b:00.0", 1))
	unsorted.Status.NUMANodes[0], unsorted.Status.NUMANodes[1] = unsorted.Status.NUMANodes[1], unsorted.Status.NUMANodes[0]

	for _, tc := range []struct {
		name     string
		topo     *v1alpha1.NodeTopology
		others   []*v1.Pod
		pod      *v1.Pod
		wantNUMA string
		wantGPUs []string
		// wantReject, if set, is part of the Filter message that drops the node.
		wantReject string
	}{
		{name: "CPU only: one NUMA node, as before", topo: topology("n", 2, 4, gpu("0000:3b:00.0", 1)),
			pod: withMemory(pod("p", "2", nil, nil), 2*gi), wantNUMA: "0"},
		{name: "memory forces two NUMA nodes", topo: topology("n", 2, 4),
			pod: withMemory(pod("p", "1", nil, nil), 12*gi), wantNUMA: "0,1"},
		{name: "devices force a second NUMA node", topo: topology("n", 4, 4, gpu("0000:3b:00.0", 0), gpu("0000:af:00.0", 1)),
			pod: withMemory(pod("p", "2", gpus(2), nil), 2*gi), wantNUMA: "0,1", wantGPUs: []string{"0000:3b:00.0", "0000:af:00.0"}},
		{name: "devices alone pick the NUMA node", topo: topology("n", 2, 4, gpu("0000:af:00.0", 1)),
			pod: withMemory(pod("p", "1", gpus(1), nil), gi), wantNUMA: "1", wantGPUs: []string{"0000:af:00.0"}},
		{name: "distance decides among three-node sets", topo: eight,
			pod: pod("p", "1", gpus(3), nil), wantNUMA: "0,1,5", wantGPUs: []string{"0000:10:00.0", "0000:11:00.0", "0000:15:00.0"}},
		{name: "unsorted NUMA IDs", topo: unsorted,
			pod: pod("p", "1", gpus(1), nil), wantNUMA: "1", wantGPUs: []string{"0000:3b:00.0"}},
		{name: "unhealthy devices do not count", topo: topology("n", 2, 4, dev{"0000:3b:00.0", v1alpha1.KindGPU, 0, false}, gpu("0000:af:00.0", 1)),
			pod: pod("p", "1", gpus(1), nil), wantNUMA: "1", wantGPUs: []string{"0000:af:00.0"}},
		{name: "allocated devices do not count", topo: topology("n", 2, 4, gpu("0000:3b:00.0", 0), gpu("0000:af:00.0", 1)),
			others: []*v1.Pod{on("n", pod("holder", "", gpus(1), allocated(v1alpha1.KindGPU, "0000:3b:00.0")))},
			pod:    pod("p", "1", gpus(1), nil), wantNUMA: "1", wantGPUs: []string{"0000:af:00.0"}},
		{name: "inside the set, devices near the pod's CPUs first", topo: cpuless,
			pod: withMemory(pod("p", "1", gpus(1), nil), 12*gi), wantNUMA: "0,1", wantGPUs: []string{"0000:90:00.0"}},
		{name: "a device of unknown NUMA node fits any set", topo: topology("n", 2, 4, gpu("0000:3b:00.0", 0), gpu("0000:af:00.0", -1)),
			pod: pod("p", "1", gpus(2), nil), wantNUMA: "0", wantGPUs: []string{"0000:3b:00.0", "0000:af:00.0"}},
		{
			// NUMAAware pins the pod to NUMA node 0 (its CPUs fit there, and the device
			// of unknown NUMA node fits any set): the GPU known to sit on NUMA node 1
			// would break that pinning, the unknown one may not.
			name: "a device of unknown NUMA node before one outside the set", topo: topology("n", 2, 4, gpu("0000:81:00.0", 1), gpu("0000:05:00.0", -1)),
			pod: pod("p", "2", gpus(1), nil), wantNUMA: "0", wantGPUs: []string{"0000:05:00.0"},
		},
		{name: "single-numa-node with devices on one NUMA node", topo: topology("n", 2, 4, gpu("0000:3b:00.0", 0), gpu("0000:af:00.0", 1), gpu("0000:b0:00.0", 1)),
			pod: pod("p", "1", gpus(2), single), wantNUMA: "1", wantGPUs: []string{"0000:af:00.0", "0000:b0:00.0"}},
		{name: "single-numa-node: the devices do not fit one NUMA node", topo: topology("n", 2, 4, gpu("0000:3b:00.0", 0), gpu("0000:af:00.0", 1)),
			pod: pod("p", "1", gpus(2), single), wantReject: "single NUMA node with enough free sextant.io/gpu"},
		{name: "single-numa-node: a device of unknown NUMA node does not count", topo: topology("n", 2, 4, gpu("0000:3b:00.0", 0), gpu("0000:af:00.0", -1)),
			pod: pod("p", "1", gpus(2), single), wantReject: "sextant.io/gpu"},
		{name: "single-numa-node: CPU and devices each fit, not together", topo: topology("n", 2, 4, gpu("0000:3b:00.0", 0)),
			others: []*v1.Pod{on("n", pod("busy", "4", nil, map[string]string{annotations.NUMANodes: "0"}))},
			pod:    pod("p", "1", gpus(1), single), wantReject: "cpu, memory and devices together"},
	} {
		for _, order := range []string{"NUMAAware first", "DeviceAware first"} {
			t.Run(tc.name+"/"+order, func(t *testing.T) {
				ni := nodeInfo("n", tc.others...)
				np, dp, _ := plugins(t, []*framework.NodeInfo{ni}, tc.topo)
				pls := []plugin{np, dp}
				if order == "DeviceAware first" {
					pls = []plugin{dp, np}
				}
				r := schedule(t, tc.pod.DeepCopy(), []*framework.NodeInfo{ni}, pls...)
				if tc.wantReject != "" {
					if r.selected != "" || r.filter["n"] == nil || !strings.Contains(r.filter["n"].Message(), tc.wantReject) {
						t.Fatalf("selected %q, filter %v; want the node dropped with %q", r.selected, r.filter["n"], tc.wantReject)
					}
					return
				}
				if r.selected != "n" {
					t.Fatalf("not scheduled: %v", r.filter)
				}
				nodes, _ := numa.ReservedNUMANodes(r.state, "n")
				if got := annotations.FormatNUMANodes(nodes); got != tc.wantNUMA {
					t.Errorf("numa.sextant.io/nodes = %q, want %q", got, tc.wantNUMA)
				}
				if got := picked(t, r.state, "n")["sextant.io/gpu"]; strings.Join(got, ",") != strings.Join(tc.wantGPUs, ",") {
					t.Errorf("GPUs = %v, want %v", got, tc.wantGPUs)
				}
			})
		}
	}
}

func withMemory(p *v1.Pod, bytes int64) *v1.Pod {
	p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = *resource.NewQuantity(bytes, resource.BinarySI)
	return p
}
