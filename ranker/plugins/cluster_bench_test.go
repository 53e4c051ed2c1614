// Package plugins_test runs sextant's plugins together: it measures them inside the
// real scheduling framework at cluster scale, beside kube-scheduler's default plugins,
// without an API server, and tests what NUMAAware and DeviceAware decide for each other
// (numadevices_test.go).
package plugins_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/parallelize"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/bandwidth"
	"sextant.io/sextant/ranker/plugins/binder"
	"sextant.io/sextant/ranker/plugins/devices"
	"sextant.io/sextant/ranker/plugins/numa"
	"sextant.io/sextant/ranker/plugins/numahint"
)

// clusterNodes is the cluster's size: runs at several sizes tell sextant's cost per pod
// from its cost per node evaluated.
var clusterNodes = flag.Int("cluster-nodes", 5000, "nodes of BenchmarkSchedulingCycle's cluster; each pod must pass a tenth of them, as kube-scheduler's default asks at 5000")

// clusterBound fills the cluster part way, as make bench-ranker's is once it has placed
// some of its pods: nodes that hold pods are what keeps NUMAAware's floor low.
var clusterBound = flag.Int("cluster-bound", 0, "pods of the bench's mix already bound to BenchmarkSchedulingCycle's nodes, each on a node drawn at random")

const (
	numaPerNode = 4
	cpusPerNUMA = 16
	memPerNUMA  = 64 << 30
	linkBits    = 10_000_000_000
	gpusPerNode = 4
)

// BenchmarkSchedulingCycle runs the scheduling algorithm's per-node work (PreFilter,
// Filter over the nodes a 5000-node cluster evaluates per pod, PreScore and Score over
// as many passing nodes as kube-scheduler keeps: a tenth of the cluster) for the mix of
// pods make bench-ranker uses, once with the default profile ("vanilla") and once with
// sextant's plugins added ("sextant"), on the same nodes and pods. Like kube-scheduler,
// each pod starts where the last one stopped, so a pod's nodes are not the ones the pod
// before it just warmed in the CPU's caches; and Filter runs 16 goroutines wide.
// Reported: ns per pod and per evaluated node, and allocations per pod.
//
// Two more profiles measure the floor under sextant's (design 0063). Each adds to the
// default profile one plugin with a Filter and a Score for the pods with bandwidth
// annotations: in "empty" they return at once (what the framework costs per plugin and
// node), in "lookup" they find the node's heartbeat record and read one word of it (the
// least any plugin that judges nodes by their heartbeats must do per node).
//
// The sub-benchmark "interleaved" runs every pod through all four profiles in turn
// (rotating which goes first) and reports each profile's time per pod over vanilla's.
// Runs of the separate sub-benchmarks one after another drift apart on a shared machine
// (docs/design/0018-how-bench-ranker-measures.md); interleaving pod by pod puts every
// profile through the same slow stretches, so its ratios are the figures to compare.
func BenchmarkSchedulingCycle(b *testing.B) {
	if *clusterNodes < 100 {
		b.Fatalf("-cluster-nodes %d: want at least 100 nodes", *clusterNodes)
	}
	schedmetrics.Register()
	nodes, store := benchCluster()
	pods := benchPods(1000)
	bound := boundPods(*clusterBound, nodes)
	profiles := []benchProfile{vanillaProfile, emptyProfile, lookupProfile, sextantProfile}
	for _, profile := range profiles {
		b.Run(string(profile), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := newCycleRunner(ctx, b, nodes, bound, store, profile, 0)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c.run(ctx, b, pods[i%len(pods)])
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(c.evaluated), "ns/node")
			b.ReportMetric(float64(c.evaluated)/float64(b.N), "nodes/pod")
		})
	}
	b.Run("interleaved", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		runners := make([]*cycleRunner, len(profiles))
		for k, profile := range profiles {
			// Each profile starts its sweep in its own quarter of the cluster, so none
			// finds the nodes the one before it just visited in the CPU's caches.
			runners[k] = newCycleRunner(ctx, b, nodes, bound, store, profile, k*len(nodes)/len(profiles))
		}
		spent := make([]time.Duration, len(profiles))
		i := 0
		for b.Loop() {
			pod := pods[i%len(pods)]
			for j := range runners {
				k := (i + j) % len(runners)
				start := time.Now()
				runners[k].run(ctx, b, pod)
				spent[k] += time.Since(start)
			}
			i++
		}
		b.ReportMetric(float64(spent[0].Nanoseconds())/float64(b.N), "vanilla-ns/pod")
		for k := 1; k < len(profiles); k++ {
			b.ReportMetric(float64(spent[k])/float64(spent[0]), string(profiles[k])+"/vanilla")
		}
	})
}

// cycleRunner runs scheduling cycles of one profile over the benchmark's cluster,
// each pod's Filter sweep starting where the last one stopped.
type cycleRunner struct {
	fw    framework.Framework
	infos []fwk.NodeInfo
	par   parallelize.Parallelizer
	// want is how many nodes must pass: kube-scheduler's default at 5000 nodes, 10%.
	want      int
	next      int
	evaluated int64
}

func newCycleRunner(ctx context.Context, b *testing.B, nodes []*v1.Node, bound []*v1.Pod, store *heartbeat.Store, profile benchProfile, start int) *cycleRunner {
	fw, infos := benchFramework(ctx, b, nodes, bound, store, profile)
	return &cycleRunner{
		fw: fw, infos: infos, par: parallelize.NewParallelizer(parallelize.DefaultParallelism),
		want: len(nodes) / 10, next: start,
	}
}

// run is one pod's scheduling cycle up to Score, as kube-scheduler's schedulePod runs it.
func (c *cycleRunner) run(ctx context.Context, b *testing.B, pod *v1.Pod) {
	fw, infos, want := c.fw, c.infos, c.want
	state := framework.NewCycleState()
	if _, st, _ := fw.RunPreFilterPlugins(ctx, state, pod); !st.IsSuccess() {
		b.Fatalf("PreFilter %s: %v", pod.Name, st)
	}
	// Filter in chunks until enough nodes pass, as findNodesThatPassFilters does.
	feasible := make([]fwk.NodeInfo, 0, want)
	var found atomic.Int32
	passed := make([]bool, len(infos))
	var checked int
	for found.Load() < int32(want) && checked < len(infos) {
		// As few nodes as may still be needed: kube-scheduler stops its parallel sweep
		// as soon as enough have passed.
		chunk := min(max(int(int32(want)-found.Load()), 16), len(infos)-checked)
		start := c.next
		c.par.Until(ctx, chunk, func(j int) {
			ni := infos[(start+j)%len(infos)]
			if fw.RunFilterPlugins(ctx, state, pod, ni).IsSuccess() {
				found.Add(1)
				passed[(start+j)%len(infos)] = true
			}
		}, "")
		checked += chunk
		c.next = (c.next + chunk) % len(infos)
	}
	c.evaluated += int64(checked)
	// At most want of them, as kube-scheduler keeps: the last chunk can pass more.
	for j := range passed {
		if passed[j] && len(feasible) < want {
			feasible = append(feasible, infos[j])
		}
	}
	if len(feasible) == 0 {
		b.Fatalf("no node passes Filter for %s", pod.Name)
	}
	if st := fw.RunPreScorePlugins(ctx, state, pod, feasible); !st.IsSuccess() {
		b.Fatalf("PreScore %s: %v", pod.Name, st)
	}
	if _, st := fw.RunScorePlugins(ctx, state, pod, feasible); !st.IsSuccess() {
		b.Fatalf("Score %s: %v", pod.Name, st)
	}
}

// benchProfile names the plugins BenchmarkSchedulingCycle runs beside kube-scheduler's.
type benchProfile string

const (
	vanillaProfile benchProfile = "vanilla"
	emptyProfile   benchProfile = "empty"
	lookupProfile  benchProfile = "lookup"
	sextantProfile benchProfile = "sextant"
)

func benchFramework(ctx context.Context, b *testing.B, nodes []*v1.Node, bound []*v1.Pod, store *heartbeat.Store, profileName benchProfile) (framework.Framework, []fwk.NodeInfo) {
	cfg, err := latest.Default()
	if err != nil {
		b.Fatal(err)
	}
	profile := cfg.Profiles[0]
	// DynamicResources needs a DRA manager, which has no stand-in here; the bench's
	// pods claim no DRA devices, so in make bench-ranker it only returns Skip.
	var enabled []config.Plugin
	for _, p := range profile.Plugins.MultiPoint.Enabled {
		if p.Name != "DynamicResources" {
			enabled = append(enabled, p)
		}
	}
	profile.Plugins.MultiPoint.Enabled = enabled
	registry := plugins.NewInTreeRegistry()
	if profileName == emptyProfile || profileName == lookupProfile {
		err := registry.Register(heartbeatLookupName, func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
			return &heartbeatLookup{store: store, lookup: profileName == lookupProfile}, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		profile.Plugins.MultiPoint.Enabled = append(profile.Plugins.MultiPoint.Enabled, config.Plugin{Name: heartbeatLookupName})
		profile.Plugins.Filter.Enabled = append(profile.Plugins.Filter.Enabled, config.Plugin{Name: heartbeatLookupName})
	}
	if profileName == sextantProfile {
		args := bandwidth.Defaults
		args.StaleAfter = metav1.Duration{Duration: time.Hour}
		sextant := frameworkruntime.Registry{
			bandwidth.Name: func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
				return bandwidth.NewWith(args, store, time.Now)
			},
			numa.Name: func(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
				return numa.NewWith(store, func(n string) (fwk.NodeInfo, error) { return h.SnapshotSharedLister().NodeInfos().Get(n) }).WithProfile(h), nil
			},
			devices.Name: func(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
				d := devices.NewWith(store, func(n string) (fwk.NodeInfo, error) { return h.SnapshotSharedLister().NodeInfos().Get(n) })
				numahint.Default.Register(h, d)
				return d, nil
			},
			binder.Name: binder.New,
		}
		if err := registry.Merge(sextant); err != nil {
			b.Fatal(err)
		}
		for _, n := range []string{bandwidth.Name, numa.Name, devices.Name} {
			profile.Plugins.MultiPoint.Enabled = append(profile.Plugins.MultiPoint.Enabled, config.Plugin{Name: n})
			// As the chart configures them: sextant's Filters before kube-scheduler's.
			profile.Plugins.Filter.Enabled = append(profile.Plugins.Filter.Enabled, config.Plugin{Name: n})
		}
		// And SextantBinder in DefaultBinder's place, which NUMAAware and DeviceAware
		// require (its PreFilter, which opens the cycle's staging area, is measured).
		profile.Plugins.MultiPoint.Enabled = slices.DeleteFunc(profile.Plugins.MultiPoint.Enabled,
			func(p config.Plugin) bool { return p.Name == defaultbinder.Name })
		profile.Plugins.MultiPoint.Enabled = append(profile.Plugins.MultiPoint.Enabled, config.Plugin{Name: binder.Name})
	}
	client := fake.NewClientset()
	snapshot := schedcache.NewSnapshot(bound, nodes)
	fw, err := frameworkruntime.NewFramework(ctx, registry, &profile,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(client, 0)),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
	)
	if err != nil {
		b.Fatal(err)
	}
	infos, err := snapshot.NodeInfos().List()
	if err != nil {
		b.Fatal(err)
	}
	out := make([]fwk.NodeInfo, len(infos))
	for i, ni := range infos {
		out[i] = ni
	}
	return fw, out
}

const heartbeatLookupName = "HeartbeatLookup"

// heartbeatLookup is the empty and lookup profiles' plugin. For pods with bandwidth
// annotations, with lookup, Filter and Score find the node's record and read one word
// of it (whether it has a NodeBandwidth), as BandwidthAware must before it can judge
// anything; without, they return at once.
type heartbeatLookup struct {
	store  *heartbeat.Store
	lookup bool
}

var (
	_ fwk.PreFilterPlugin = &heartbeatLookup{}
	_ fwk.FilterPlugin    = &heartbeatLookup{}
	_ fwk.PreScorePlugin  = &heartbeatLookup{}
	_ fwk.ScorePlugin     = &heartbeatLookup{}
	_ fwk.SignPlugin      = &heartbeatLookup{}
)

func (*heartbeatLookup) Name() string { return heartbeatLookupName }

func (*heartbeatLookup) PreFilter(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !annotations.HasBandwidth(pod.Annotations) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return nil, nil
}

func (*heartbeatLookup) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// SignPod keeps kube-scheduler's signatures on for the profile, as sextant's plugins do.
func (*heartbeatLookup) SignPod(context.Context, *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return nil, nil
}

func (pl *heartbeatLookup) Filter(_ context.Context, _ fwk.CycleState, _ *v1.Pod, ni fwk.NodeInfo) *fwk.Status {
	if pl.lookup && pl.store.NodeOf(ni.Node()).Bandwidth() == nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "no NodeBandwidth")
	}
	return nil
}

func (*heartbeatLookup) PreScore(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if !annotations.HasBandwidth(pod.Annotations) {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

func (pl *heartbeatLookup) Score(_ context.Context, _ fwk.CycleState, _ *v1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	if pl.lookup && pl.store.NodeOf(ni.Node()).Bandwidth() == nil {
		return 0, nil
	}
	return 1, nil
}

func (*heartbeatLookup) ScoreExtensions() fwk.ScoreExtensions { return nil }

// benchCluster returns nodes like make bench-ranker's (tainted unreachable, as kubelet-
// less nodes are) with a NodeBandwidth and a NodeTopology each.
func benchCluster() ([]*v1.Node, *heartbeat.Store) {
	rng := rand.New(rand.NewSource(1))
	var objs []runtime.Object
	nodes := make([]*v1.Node, *clusterNodes)
	now := metav1.Now()
	for i := range nodes {
		name := fmt.Sprintf("bench-node-%05d", i)
		alloc := v1.ResourceList{
			v1.ResourceCPU:                  *resource.NewQuantity(numaPerNode*cpusPerNUMA, resource.DecimalSI),
			v1.ResourceMemory:               *resource.NewQuantity(numaPerNode*memPerNUMA, resource.BinarySI),
			v1.ResourcePods:                 *resource.NewQuantity(110, resource.DecimalSI),
			v1alpha1.KindGPU.ResourceName(): *resource.NewQuantity(gpusPerNode, resource.DecimalSI),
		}
		nodes[i] = &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Labels: map[string]string{
				"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "sextant.io/bench": "run",
			}},
			Spec: v1.NodeSpec{Taints: []v1.Taint{
				{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoSchedule},
				{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute},
			}},
			Status: v1.NodeStatus{Capacity: alloc, Allocatable: alloc},
		}
		rem := func() *resource.Quantity {
			return resource.NewQuantity(rng.Int63n(101)*100_000_000, resource.DecimalSI)
		}
		capacity := resource.NewQuantity(linkBits, resource.DecimalSI)
		objs = append(objs, &v1alpha1.NodeBandwidth{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: v1alpha1.NodeBandwidthStatus{SampleTime: &now, Window: &metav1.Duration{Duration: time.Minute}, Total: &v1alpha1.Bandwidth{
				Ingress: v1alpha1.DirectionBandwidth{Capacity: capacity, Remaining: rem()},
				Egress:  v1alpha1.DirectionBandwidth{Capacity: capacity, Remaining: rem()},
			}},
		}, benchTopology(name))
	}
	return nodes, heartbeat.NewFromObjects(objs...)
}

func benchTopology(name string) *v1alpha1.NodeTopology {
	numaID := func(id int32) *int32 { return &id }
	t := &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for n := int32(0); n < numaPerNode; n++ {
		var cpus []int32
		for c := int32(0); c < cpusPerNUMA; c++ {
			cpus = append(cpus, n*cpusPerNUMA+c)
		}
		dist := make([]int32, numaPerNode)
		for m := range dist {
			dist[m] = 21
		}
		dist[n] = 10
		t.Status.Topology.NUMANodes = append(t.Status.Topology.NUMANodes, v1alpha1.NUMANode{ID: n, CPUs: cpus, MemoryBytes: memPerNUMA, Distances: dist})
	}
	for g := range gpusPerNode {
		t.Status.Topology.PCIDevices = append(t.Status.Topology.PCIDevices, v1alpha1.PCIDevice{
			Address: fmt.Sprintf("0000:%02x:00.0", 0x3b+g), Kind: v1alpha1.KindGPU,
			NUMANode: numaID(int32(g * numaPerNode / gpusPerNode)), Health: v1alpha1.Healthy,
		})
	}
	return t
}

// boundPods returns n pods of benchPods' mix, each bound to a node drawn at random.
func boundPods(n int, nodes []*v1.Node) []*v1.Pod {
	rng := rand.New(rand.NewSource(3))
	mix := benchPods(max(n, 1))
	out := make([]*v1.Pod, n)
	for i := range out {
		p := mix[i].DeepCopy()
		p.Name = fmt.Sprintf("bound-%05d", i)
		p.UID = types.UID(p.Name)
		p.Spec.NodeName = nodes[rng.Intn(len(nodes))].Name
		out[i] = p
	}
	return out
}

// benchPods is make bench-ranker's mix: 10% GPU jobs, 30% large CPU and memory, the
// rest small; half with bandwidth annotations (required, expected or both, per direction).
func benchPods(n int) []*v1.Pod {
	rng := rand.New(rand.NewSource(2))
	between := func(lo, hi int64) int64 { return lo + rng.Int63n(hi-lo+1) }
	pods := make([]*v1.Pod, n)
	for i := range pods {
		req := v1.ResourceList{}
		switch r := rng.Float64(); {
		case r < 0.10:
			req[v1.ResourceCPU] = *resource.NewQuantity(between(1, 8), resource.DecimalSI)
			req[v1.ResourceMemory] = *resource.NewQuantity(between(2, 16)<<30, resource.BinarySI)
			req[v1alpha1.KindGPU.ResourceName()] = *resource.NewQuantity(between(1, 2), resource.DecimalSI)
		case r < 0.40:
			req[v1.ResourceCPU] = *resource.NewQuantity(between(2, 24), resource.DecimalSI)
			req[v1.ResourceMemory] = *resource.NewQuantity(between(4, 48)<<30, resource.BinarySI)
		default:
			req[v1.ResourceCPU] = *resource.NewMilliQuantity(between(1, 5)*100, resource.DecimalSI)
			req[v1.ResourceMemory] = *resource.NewQuantity(between(1, 4)*128<<20, resource.BinarySI)
		}
		ann := map[string]string{}
		if rng.Float64() < 0.5 {
			dirs := [][2]string{
				{annotations.IngressRequired, annotations.IngressExpected},
				{annotations.EgressRequired, annotations.EgressExpected},
			}
			for _, d := range [][]int{{0}, {1}, {0, 1}}[rng.Intn(3)] {
				rate := between(1, 40) * 50_000_000
				qty := func(v int64) string { return resource.NewQuantity(v, resource.DecimalSI).String() }
				switch r := rng.Float64(); {
				case r < 0.5:
					ann[dirs[d][0]], ann[dirs[d][1]] = qty(rate), qty(rate+between(0, rate/100_000_000)*50_000_000)
				case r < 0.8:
					ann[dirs[d][0]] = qty(rate)
				default:
					ann[dirs[d][1]] = qty(rate)
				}
			}
		}
		name := fmt.Sprintf("pod-%04d", i)
		pods[i] = &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", UID: types.UID(name), Annotations: ann},
			Spec: v1.PodSpec{
				NodeSelector: map[string]string{"sextant.io/bench": "run"},
				Tolerations:  []v1.Toleration{{Operator: v1.TolerationOpExists}},
				Containers:   []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{Requests: req, Limits: req}}},
			},
		}
	}
	return pods
}
