package numa

import (
	"context"
	"sort"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/cycletest"
)

const gi = int64(1) << 30

// numaSpec is one NUMA node of a test topology.
type numaSpec struct {
	cpus int
	mem  int64
	dist []int32
}

func topology(node string, specs ...numaSpec) *v1alpha1.NodeTopology {
	nt := &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: node}}
	cpu := int32(0)
	for i, s := range specs {
		n := v1alpha1.NUMANode{ID: int32(i), MemoryBytes: s.mem, Distances: s.dist}
		for range s.cpus {
			n.CPUs = append(n.CPUs, cpu)
			cpu++
		}
		nt.Status.NUMANodes = append(nt.Status.NUMANodes, n)
	}
	return nt
}

// uniform is n NUMA nodes of cpus CPUs and mem bytes each, distance 10 local, 21 remote.
func uniform(node string, n, cpus int, mem int64) *v1alpha1.NodeTopology {
	specs := make([]numaSpec, n)
	for i := range specs {
		d := make([]int32, n)
		for j := range d {
			d[j] = 21
		}
		d[i] = 10
		specs[i] = numaSpec{cpus: cpus, mem: mem, dist: d}
	}
	return topology(node, specs...)
}

func pod(name, cpu string, mem int64, annotations map[string]string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), Annotations: annotations},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}}}}},
	}
	if cpu != "" {
		p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem > 0 {
		p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = *resource.NewQuantity(mem, resource.BinarySI)
	}
	return p
}

func on(node string, p *v1.Pod) *v1.Pod {
	p.Spec.NodeName = node
	return p
}

func nodeInfo(name string, pods ...*v1.Pod) *framework.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return ni
}

func newPlugin(t *testing.T, infos []*framework.NodeInfo, topos ...*v1alpha1.NodeTopology) (*NUMAAware, *fake.Clientset) {
	t.Helper()
	return NewWith(cycletest.Heartbeats(topos...), cycletest.Snapshot(infos)), fake.NewClientset()
}

// result is one scheduling cycle run by hand, the way the framework runs it.
type result struct {
	state    fwk.CycleState
	prefilt  *fwk.Status
	filter   map[string]*fwk.Status
	scores   map[string]int64
	selected string
}

func schedule(t *testing.T, pl *NUMAAware, p *v1.Pod, infos []*framework.NodeInfo) result {
	t.Helper()
	ctx := context.Background()
	r := result{state: newState(), filter: map[string]*fwk.Status{}, scores: map[string]int64{}}
	_, r.prefilt = pl.PreFilter(ctx, r.state, p, list(infos))
	if code := r.prefilt.Code(); code != fwk.Success && code != fwk.Skip {
		return r
	}
	var feasible []fwk.NodeInfo
	for _, ni := range infos {
		var st *fwk.Status
		if r.prefilt.Code() != fwk.Skip {
			st = pl.Filter(ctx, r.state, p, ni)
		}
		r.filter[ni.Node().Name] = st
		if st.IsSuccess() {
			feasible = append(feasible, ni)
		}
	}
	if len(feasible) == 0 {
		return r
	}
	var list fwk.NodeScoreList
	if st := pl.PreScore(ctx, r.state, p, feasible); st.IsSuccess() {
		for _, ni := range feasible {
			s, st := pl.Score(ctx, r.state, p, ni)
			if !st.IsSuccess() {
				t.Fatalf("Score(%s): %v", ni.Node().Name, st)
			}
			list = append(list, fwk.NodeScore{Name: ni.Node().Name, Score: s})
		}
		if st := pl.NormalizeScore(ctx, r.state, p, list); !st.IsSuccess() {
			t.Fatalf("NormalizeScore: %v", st)
		}
	} else {
		for _, ni := range feasible {
			list = append(list, fwk.NodeScore{Name: ni.Node().Name})
		}
	}
	sort.SliceStable(list, func(a, b int) bool {
		if list[a].Score != list[b].Score {
			return list[a].Score > list[b].Score
		}
		return list[a].Name < list[b].Name
	})
	for _, s := range list {
		r.scores[s.Name] = s.Score
	}
	r.selected = list[0].Name
	return r
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// newState is a cycle's state with SextantBinder's staging area open, as its PreFilter
// leaves it in a profile that binds with it.
func newState() *framework.CycleState {
	s := framework.NewCycleState()
	binder.Open(s)
	return s
}
