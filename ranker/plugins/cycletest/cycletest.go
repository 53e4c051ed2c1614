// Package cycletest runs scheduling cycles of sextant's plugins in unit tests, the way
// kube-scheduler's framework runs them, without a scheduler, and builds the topologies,
// pods and nodes they run on.
package cycletest

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/nodelookup"
)

// NewState is a cycle's state with SextantBinder's staging area open, as its PreFilter
// leaves it in a profile that binds with it.
func NewState() *framework.CycleState {
	s := framework.NewCycleState()
	binder.Open(s)
	return s
}

// Plugin is what one cycle of Schedule runs of each plugin.
type Plugin interface {
	fwk.PreFilterPlugin
	fwk.FilterPlugin
	fwk.PreScorePlugin
	fwk.ScorePlugin
	fwk.ReservePlugin
}

// Result is what a cycle decided: each plugin's scores by node, the first rejection per
// node, the node the pod was reserved on (empty: none fit) and the cycle's state.
type Result struct {
	State    fwk.CycleState
	Filter   map[string]*fwk.Status // first rejection per node
	Scores   map[string]map[string]int64
	Selected string
}

// Schedule runs one cycle of the given plugins, in order, the way the framework does,
// and reserves the pod on the best node (sum of scores, ties by name).
func Schedule(t testing.TB, p *v1.Pod, infos []*framework.NodeInfo, pls ...Plugin) Result {
	t.Helper()
	ctx := context.Background()
	r := Result{State: NewState(), Filter: map[string]*fwk.Status{}, Scores: map[string]map[string]int64{}}
	skipFilter := map[string]bool{}
	for _, pl := range pls {
		_, st := pl.PreFilter(ctx, r.State, p, nil)
		switch st.Code() {
		case fwk.Success:
		case fwk.Skip:
			skipFilter[pl.Name()] = true
		default:
			t.Fatalf("%s PreFilter: %v", pl.Name(), st)
		}
	}
	var feasible []fwk.NodeInfo
	for _, ni := range infos {
		ok := true
		for _, pl := range pls {
			if skipFilter[pl.Name()] {
				continue
			}
			if st := pl.Filter(ctx, r.State, p, ni); !st.IsSuccess() {
				r.Filter[ni.Node().Name] = st
				ok = false
				break
			}
		}
		if ok {
			feasible = append(feasible, ni)
		}
	}
	if len(feasible) == 0 {
		return r
	}
	total := map[string]int64{}
	for _, pl := range pls {
		if !pl.PreScore(ctx, r.State, p, feasible).IsSuccess() {
			continue
		}
		var list fwk.NodeScoreList
		for _, ni := range feasible {
			s, st := pl.Score(ctx, r.State, p, ni)
			if !st.IsSuccess() {
				t.Fatalf("%s Score: %v", pl.Name(), st)
			}
			list = append(list, fwk.NodeScore{Name: ni.Node().Name, Score: s})
		}
		if ext := pl.ScoreExtensions(); ext != nil {
			if st := ext.NormalizeScore(ctx, r.State, p, list); !st.IsSuccess() {
				t.Fatalf("%s NormalizeScore: %v", pl.Name(), st)
			}
		}
		r.Scores[pl.Name()] = map[string]int64{}
		for _, s := range list {
			r.Scores[pl.Name()][s.Name] = s.Score
			total[s.Name] += s.Score
		}
	}
	for _, ni := range feasible {
		n := ni.Node().Name
		if r.Selected == "" || total[n] > total[r.Selected] || total[n] == total[r.Selected] && n < r.Selected {
			r.Selected = n
		}
	}
	for _, pl := range pls {
		if st := pl.Reserve(ctx, r.State, p, r.Selected); !st.IsSuccess() {
			t.Fatalf("%s Reserve: %v", pl.Name(), st)
		}
	}
	return r
}

// GiB is a gibibyte in bytes.
const GiB = int64(1) << 30

// Device is a PCI device of a Topology. An alias of an unnamed struct, so tests may
// write it unkeyed.
type Device = struct {
	Addr    string
	Kind    v1alpha1.DeviceKind
	NUMA    int32 // -1: unknown
	Healthy bool
}

// WithDevice changes the device at addr of nt.
func WithDevice(nt *v1alpha1.NodeTopology, addr string, change func(*v1alpha1.PCIDevice)) *v1alpha1.NodeTopology {
	for i := range nt.Status.PCIDevices {
		if nt.Status.PCIDevices[i].Address == addr {
			change(&nt.Status.PCIDevices[i])
		}
	}
	return nt
}

// GPU is a healthy GPU at addr on NUMA node numaNode.
func GPU(addr string, numaNode int32) Device { return Device{addr, v1alpha1.KindGPU, numaNode, true} }

// Topology is a node of nNUMA NUMA nodes with cpus CPUs and 8 GiB each, and devs.
func Topology(node string, nNUMA, cpus int, devs ...Device) *v1alpha1.NodeTopology {
	nt := &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: node}}
	cpu := int32(0)
	for i := range nNUMA {
		n := v1alpha1.NUMANode{ID: int32(i), MemoryBytes: 8 * GiB}
		for range cpus {
			n.CPUs = append(n.CPUs, cpu)
			cpu++
		}
		for j := range nNUMA {
			n.Distances = append(n.Distances, map[bool]int32{true: 10, false: 21}[i == j])
		}
		nt.Status.NUMANodes = append(nt.Status.NUMANodes, n)
	}
	for _, d := range devs {
		pd := v1alpha1.PCIDevice{Address: d.Addr, Kind: d.Kind, Health: v1alpha1.Healthy, Class: "0x030200", Vendor: "0x10de"}
		if d.NUMA >= 0 {
			n := d.NUMA
			pd.NUMANode = &n
		}
		if !d.Healthy {
			pd.Health = v1alpha1.Unhealthy
		}
		nt.Status.PCIDevices = append(nt.Status.PCIDevices, pd)
	}
	return nt
}

// Pod asks for cpu and the given devices (as limits, as users usually write them).
func Pod(name, cpu string, devs map[v1alpha1.DeviceKind]int64, annotations map[string]string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), Annotations: annotations},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{}, Limits: v1.ResourceList{},
		}}}},
	}
	if cpu != "" {
		p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	for k, n := range devs {
		p.Spec.Containers[0].Resources.Limits[k.ResourceName()] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return p
}

// On is p bound to node.
func On(node string, p *v1.Pod) *v1.Pod {
	p.Spec.NodeName = node
	return p
}

// Allocated is the annotations of a pod allocated ids of kind.
func Allocated(kind v1alpha1.DeviceKind, ids ...string) map[string]string {
	return map[string]string{annotations.DevicesAllocated: annotations.Allocation{kind.ResourceName(): ids}.String()}
}

// NodeInfo is the scheduler's view of node name with pods.
func NodeInfo(name string, pods ...*v1.Pod) *framework.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return ni
}

// Heartbeats is a heartbeat store holding topos, each node's agent alive: its
// NodeBandwidth arrived just now.
func Heartbeats(topos ...*v1alpha1.NodeTopology) *heartbeat.Store {
	objs := make([]runtime.Object, 0, 2*len(topos))
	for _, nt := range topos {
		objs = append(objs, nt, &v1alpha1.NodeBandwidth{ObjectMeta: metav1.ObjectMeta{Name: nt.Name}})
	}
	return heartbeat.NewFromObjects(objs...)
}

// Snapshot looks nodes up among infos, as the scheduler's snapshot does.
func Snapshot(infos []*framework.NodeInfo) nodelookup.NodeInfos {
	byName := map[string]fwk.NodeInfo{}
	for _, ni := range infos {
		byName[ni.Node().Name] = ni
	}
	return func(node string) (fwk.NodeInfo, error) {
		if ni, ok := byName[node]; ok {
			return ni, nil
		}
		return nil, fmt.Errorf("node %q not found", node)
	}
}
