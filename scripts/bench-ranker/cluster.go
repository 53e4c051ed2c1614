package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	sextantv1 "sextant.io/sextant/api/v1alpha1"
)

// bench is one cluster size: its nodes, its workload, and its runs.
type bench struct {
	o     options
	cfg   *rest.Config
	kube  kubernetes.Interface
	dyn   dynamic.Interface
	size  int
	shape nodeShape
	runID string
	ns    string
	// rounds are the rounds this setup runs (from 0: all of --rounds, or one when
	// shapes are interleaved); round is the one being run.
	rounds []int
	round  int
	nodes  []string
	// remaining is each node's reported remaining bandwidth per network (in the
	// shape's order), [ingress, egress] in bits/s.
	remaining map[string][][2]int64
	workload  []podSpec
}

// podSpec is one pod of the workload, as the analysis needs it.
type podSpec struct {
	milliCPU int64
	memory   int64
	gpus     int64
	// required and expected bandwidth, [ingress, egress], 0 when not asked.
	required     [2]int64
	expected     [2]int64
	mostHeadroom bool
	// network indexes the shape's networks: 0 is pod, the default.
	network int
	kind    string // small, numa, gpu
}

type result struct {
	scheduler   string
	shape       string
	size        int
	round       int
	pods        int
	bound       int
	unscheduled int
	elapsed     time.Duration
	podsPerSec  float64
	bwViolation int
	bwAsked     int
	numaSpread  int
	numaPods    int
	numaMissing int
	numaSource  string
	note        string
	// cpu is the scheduler process's CPU time (user + system) from ready to the end of
	// the run; cpuPerPod is that over the bound pods.
	cpu       time.Duration
	cpuPerPod time.Duration
	// peakRSS is the scheduler process's peak resident memory (VmHWM), in bytes: the
	// price of its GC settings and caches. 0 when unknown.
	peakRSS int64
	// liveHeap is the scheduler's live heap after the run (go_gc_heap_live_bytes after a
	// forced garbage collection), in bytes: what it keeps, whatever its GC settings let
	// the heap grow to. 0 when unknown.
	liveHeap int64
	// breakdown says where the scheduler spent its time, from its own metrics.
	breakdown string
	// pluginMeans is the sextant plugins' mean time per Score and Filter call, from
	// the scheduler's metrics; empty for runs without them.
	pluginMeans string
	measured    bool
}

func (b *bench) runSize(ctx context.Context) (results []result, err error) {
	defer func() {
		// Always clean up, also when ctx was cancelled by a signal.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if cerr := b.cleanup(cctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	start := time.Now()
	if err := b.setup(ctx); err != nil {
		return nil, fmt.Errorf("set up: %w", err)
	}
	logf("%s nodes: set up in %s", b.label(), time.Since(start).Round(time.Second))
	b.workload = makeWorkload(b.o.seed, b.o.pods, b.shape.gpuPodMax)
	assignNetworks(b.workload, b.shape)

	for _, b.round = range b.rounds {
		// Every other round in reverse, so that no scheduler always runs first or
		// always after the same one.
		order := slices.Clone(b.o.schedulers)
		if b.round%2 == 1 {
			slices.Reverse(order)
		}
		for _, sched := range order {
			res, err := b.runOnce(ctx, sched)
			if res.measured {
				// Keep the numbers even when tearing the run down failed.
				results = append(results, res)
			}
			if err != nil {
				return results, fmt.Errorf("%s run: %w", sched, err)
			}
		}
	}
	return results, nil
}

// tag names this shape and size in run IDs and file names: <nodes>, or <shape>-<nodes>
// for a shape other than the default (whose names are what they were before shapes).
func (b *bench) tag() string {
	if b.shape.name == defaultShape {
		return strconv.Itoa(b.size)
	}
	return fmt.Sprintf("%s-%d", b.shape.name, b.size)
}

// label names this shape and size in the log before " nodes": "5000", or
// "8numa-8gpu, 5000" for a shape other than the default.
func (b *bench) label() string {
	if b.shape.name == defaultShape {
		return strconv.Itoa(b.size)
	}
	return fmt.Sprintf("%s, %d", b.shape.name, b.size)
}

// fileName names a file of this shape's and size's current round in the work
// directory: <what>-<tag>.<ext>, with -r<round> added from the second round on.
func (b *bench) fileName(what, ext string) string {
	name := what + "-" + b.tag()
	if b.round > 0 {
		name += fmt.Sprintf("-r%d", b.round+1)
	}
	return filepath.Join(b.o.workDir, name+"."+ext)
}

// parallel runs fn for 0..n-1 on the harness's workers and returns the first error.
func (b *bench) parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for w := 0; w < b.o.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

func (b *bench) setup(ctx context.Context) error {
	b.ns = "sextant-bench-" + b.runID
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: b.ns, Labels: map[string]string{labelBench: b.runID}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", b.ns, err)
	}

	rng := rand.New(rand.NewSource(b.o.seed*7919 + int64(b.size)))
	b.nodes = make([]string, b.size)
	// The other networks draw from their own source, so that the pod network's
	// remaining is the same in every shape.
	otherRng := rand.New(rand.NewSource(b.o.seed*7927 + int64(b.size)))
	b.remaining = make(map[string][][2]int64, b.size)
	for i := range b.nodes {
		name := fmt.Sprintf("bench-%s-%05d", b.runID, i)
		b.nodes[i] = name
		// Remaining is spread evenly over the whole link, in 100M steps: some nodes
		// are idle, some saturated, most in between.
		rem := [][2]int64{{rng.Int63n(101) * 100_000_000, rng.Int63n(101) * 100_000_000}}
		for range b.shape.networks[1:] {
			rem = append(rem, [2]int64{otherRng.Int63n(101) * 100_000_000, otherRng.Int63n(101) * 100_000_000})
		}
		b.remaining[name] = rem
	}

	if b.shape.dra {
		if err := b.createDeviceClass(ctx); err != nil {
			return err
		}
	}
	var done atomic.Int64
	progress := startProgress(fmt.Sprintf("%s nodes: creating Nodes, NodeBandwidths, NodeTopologies", b.label()), &done, b.size)
	defer progress()
	return b.parallel(ctx, b.size, func(ctx context.Context, i int) error {
		name := b.nodes[i]
		node, err := b.kube.CoreV1().Nodes().Create(ctx, benchNode(name, b.runID, b.shape), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID}}
		meta := metav1.ObjectMeta{Name: name, OwnerReferences: owner, Labels: map[string]string{labelBench: b.runID}}
		rem := b.remaining[name]
		nbw := &sextantv1.NodeBandwidth{
			TypeMeta:   metav1.TypeMeta{APIVersion: sextantv1.GroupVersion.String(), Kind: "NodeBandwidth"},
			ObjectMeta: meta,
			Status:     bandwidthStatus(rem, b.shape.networks, time.Now()),
		}
		if err := createWithStatus(ctx, b.dyn, nbwGVR, nbw); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		ntopo := &sextantv1.NodeTopology{
			TypeMeta:   metav1.TypeMeta{APIVersion: sextantv1.GroupVersion.String(), Kind: "NodeTopology"},
			ObjectMeta: meta,
			Status:     topologyStatus(time.Now(), b.shape),
		}
		if err := createWithStatus(ctx, b.dyn, ntopoGVR, ntopo); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		if b.shape.dra {
			if _, err := b.kube.ResourceV1().ResourceSlices().Create(ctx, resourceSlice(name, b.runID, b.shape), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("node %s: create ResourceSlice: %w", name, err)
			}
		}
		done.Add(1)
		return nil
	})
}

// startProgress logs done/total every 10 s until the returned func is called.
func startProgress(what string, done *atomic.Int64, total int) func() {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				logf("%s: %d/%d", what, done.Load(), total)
			}
		}
	}()
	return func() { close(stop) }
}

func benchNode(name, runID string, shape nodeShape) *corev1.Node {
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(shape.cpus()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(shape.memory(), resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(podsPerNode, resource.DecimalSI),
	}
	if !shape.dra {
		alloc[resourceGPU] = *resource.NewQuantity(int64(len(shape.gpuAddrs)), resource.DecimalSI)
	}
	now := metav1.Now()
	// A Node's status is taken on create (the kubelet registers this way), so one
	// request makes a schedulable node.
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			labelBench:               runID,
			labelAgent:               "none", // the agent DaemonSet stays off these nodes
			"kubernetes.io/hostname": name,
			"kubernetes.io/os":       "linux",
			"kubernetes.io/arch":     "amd64",
		}},
		Status: corev1.NodeStatus{
			Capacity:    alloc,
			Allocatable: alloc.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "bench node, no kubelet", LastHeartbeatTime: now, LastTransitionTime: now,
			}},
		},
	}
}

func bitsQty(v int64) *resource.Quantity { return resource.NewQuantity(v, resource.DecimalSI) }

// bandwidthStatus is a heartbeat as the agent writes it: network i on interface eth<i>
// with remaining rem[i]; total sums the interfaces.
func bandwidthStatus(rem [][2]int64, networks []string, at time.Time) sextantv1.NodeBandwidthStatus {
	dir := func(remaining int64) sextantv1.DirectionBandwidth {
		peak := linkCapacity - remaining
		return sextantv1.DirectionBandwidth{
			Capacity:  bitsQty(linkCapacity),
			Rate:      bitsQty(peak * 3 / 5),
			Peak:      bitsQty(peak),
			Remaining: bitsQty(remaining),
		}
	}
	var ifaces []sextantv1.InterfaceBandwidth
	var nets []sextantv1.NetworkBandwidth
	var total [2][4]int64 // per direction: capacity, rate, peak, remaining
	for i, name := range networks {
		bw := sextantv1.Bandwidth{Ingress: dir(rem[i][0]), Egress: dir(rem[i][1])}
		iface := fmt.Sprintf("eth%d", i)
		ifaces = append(ifaces, sextantv1.InterfaceBandwidth{Name: iface, Bandwidth: bw})
		nets = append(nets, sextantv1.NetworkBandwidth{Name: name, Interfaces: []string{iface}, Bandwidth: *bw.DeepCopy()})
		for d := range 2 {
			peak := linkCapacity - rem[i][d]
			for k, v := range [4]int64{linkCapacity, peak * 3 / 5, peak, rem[i][d]} {
				total[d][k] += v
			}
		}
	}
	sum := func(v [4]int64) sextantv1.DirectionBandwidth {
		return sextantv1.DirectionBandwidth{Capacity: bitsQty(v[0]), Rate: bitsQty(v[1]), Peak: bitsQty(v[2]), Remaining: bitsQty(v[3])}
	}
	t := metav1.NewTime(at)
	return sextantv1.NodeBandwidthStatus{
		SampleTime:   &t,
		Window:       &metav1.Duration{Duration: time.Minute},
		AgentVersion: "bench",
		Interfaces:   ifaces,
		Total:        &sextantv1.Bandwidth{Ingress: sum(total[0]), Egress: sum(total[1])},
		Networks:     nets,
	}
}

func topologyStatus(at time.Time, shape nodeShape) sextantv1.NodeTopologyStatus {
	numa := func(id int32) *int32 { return &id }
	var nodes []sextantv1.NUMANode
	for n := range shape.numaNodes {
		var cpus []int32
		for c := range shape.cpusPerNUMA {
			cpus = append(cpus, int32(n*shape.cpusPerNUMA+c))
		}
		dist := make([]int32, shape.numaNodes)
		for m := range dist {
			dist[m] = shape.distance(n, m)
		}
		nodes = append(nodes, sextantv1.NUMANode{ID: int32(n), CPUs: cpus, MemoryBytes: shape.memPerNUMA, Distances: dist})
	}
	var devs []sextantv1.PCIDevice
	for i, a := range shape.gpuAddrs {
		devs = append(devs, sextantv1.PCIDevice{
			Address: a, Class: "0x030200", Vendor: "0x10de", Device: "0x20b0", Driver: "nvidia",
			Kind: sextantv1.KindGPU, NUMANode: numa(int32(shape.gpuNUMA(i))),
			Health: sextantv1.Healthy,
		})
		if shape.dra {
			devs[len(devs)-1].Excluded = draExcluded
		}
	}
	nicAddr := "0000:18:00.0"
	devs = append(devs, sextantv1.PCIDevice{
		Address: nicAddr, Class: "0x020000", Vendor: "0x15b3", Device: "0x1017", Driver: "mlx5_core",
		Kind: sextantv1.KindNIC, NUMANode: numa(0), Health: sextantv1.Healthy,
	})
	speed := int64(linkCapacity / 1_000_000)
	t := metav1.NewTime(at)
	return sextantv1.NodeTopologyStatus{
		UpdateTime:   &t,
		AgentVersion: "bench",
		Summary: &sextantv1.TopologySummary{
			NUMANodes: int32(shape.numaNodes), CPUs: int32(shape.cpus()), Devices: int32(len(devs)),
		},
		Topology: sextantv1.Topology{
			NUMANodes:  nodes,
			PCIDevices: devs,
			NICs:       []sextantv1.NIC{{Name: "eth0", PCIAddress: &nicAddr, NUMANode: numa(0), SpeedMbps: &speed}},
		},
	}
}

// createWithStatus creates obj, then writes its status through the status subresource,
// which is the only way a CRD with that subresource takes a status.
func createWithStatus(ctx context.Context, dyn dynamic.Interface, gvr schemaGVR, obj runtime.Object) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("convert %s: %w", gvr.Resource, err)
	}
	u := &unstructured.Unstructured{Object: m}
	created, err := dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create %s: %w", gvr.Resource, err)
	}
	u.SetResourceVersion(created.GetResourceVersion())
	u.SetUID(created.GetUID())
	if _, err := dyn.Resource(gvr).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("write %s status: %w", gvr.Resource, err)
	}
	return nil
}

// refreshHeartbeats writes a fresh sampleTime into every NodeBandwidth, as live agents
// would, so neither run sees a report the other run's duration made stale.
func (b *bench) refreshHeartbeats(ctx context.Context) error {
	return b.parallel(ctx, len(b.nodes), func(ctx context.Context, i int) error {
		name := b.nodes[i]
		// Only the sample time moves: the bench's remaining values stay as set up.
		patch := fmt.Sprintf(`{"status":{"sampleTime":%q}}`, time.Now().UTC().Format(time.RFC3339))
		if _, err := b.dyn.Resource(nbwGVR).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("refresh NodeBandwidth %s: %w", name, err)
		}
		return nil
	})
}

// keepHeartbeatsFresh refreshes every NodeBandwidth each heartbeatRefresh until ctx
// ends; a failed refresh is logged, and the run's NUMA spread and annotations show what
// it cost.
func (b *bench) keepHeartbeatsFresh(ctx context.Context, sched string) {
	tick := time.NewTicker(heartbeatRefresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := b.refreshHeartbeats(ctx); err != nil && ctx.Err() == nil {
				logf("%s nodes, %s: refreshing heartbeats during the run: %v", b.label(), sched, err)
			}
		}
	}
}

// heartbeatRefresh is how often the bench rewrites the heartbeats during a run: as
// often as live agents do at the least (--report-max-interval). A node's reports are
// then at most this plus one refresh of every node apart, and a refresh slowed by the
// run's own API traffic still lands inside the ranker's 2-minute silence.
const heartbeatRefresh = 30 * time.Second

func (b *bench) waitServiceAccount(ctx context.Context) error {
	// The ServiceAccount admission plugin refuses pods until the namespace's default
	// ServiceAccount exists.
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := b.kube.CoreV1().ServiceAccounts(b.ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("default service account of %s: %w", b.ns, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (b *bench) deletePods(ctx context.Context, sched string) error {
	logf("%s nodes, %s: deleting pods", b.label(), sched)
	sel := metav1.ListOptions{LabelSelector: labelScheduler + "=" + sched}
	// Grace period 0: no kubelet will ever confirm a graceful deletion of a bound pod.
	// One by one on the harness's workers: the API server runs a DeleteCollection on a
	// single worker.
	zero := int64(0)
	for {
		list, err := b.kube.CoreV1().Pods(b.ns).List(ctx, sel)
		if err != nil {
			return fmt.Errorf("list %s pods: %w", sched, err)
		}
		if len(list.Items) == 0 {
			if b.shape.dra {
				return b.deleteClaims(ctx, sched)
			}
			return nil
		}
		err = b.parallel(ctx, len(list.Items), func(ctx context.Context, i int) error {
			name := list.Items[i].Name
			if err := b.kube.CoreV1().Pods(b.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete pod %s: %w", name, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
}

// cleanup removes everything of this size's run: pods (with the namespace), Nodes, and
// their heartbeat objects (which the garbage collector would also remove, more slowly).
func (b *bench) cleanup(ctx context.Context) error {
	logf("%s nodes: cleaning up", b.label())
	var errs []error
	sel := metav1.ListOptions{LabelSelector: labelBench + "=" + b.runID}
	zero := int64(0)
	if b.ns != "" {
		if err := b.kube.CoreV1().Pods(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete pods: %w", err))
		}
		if err := b.kube.CoreV1().Namespaces().Delete(ctx, b.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", b.ns, err))
		}
	}
	// One by one on the harness's workers: the API server runs a DeleteCollection on a
	// single worker, minutes for 5000 objects. Heartbeats first, so the garbage
	// collector has nothing left to chase when the Nodes go.
	type victim struct {
		gvr  schemaGVR
		name string
	}
	var victims []victim
	if b.shape.dra {
		if err := b.kube.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
			errs = append(errs, fmt.Errorf("delete ResourceSlices: %w", err))
		}
		if err := b.kube.ResourceV1().DeviceClasses().Delete(ctx, draClass, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete DeviceClass %s: %w", draClass, err))
		}
	}
	for _, gvr := range []schemaGVR{nbwGVR, ntopoGVR} {
		list, err := b.dyn.Resource(gvr).List(ctx, sel)
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", gvr.Resource, err))
			continue
		}
		for _, it := range list.Items {
			victims = append(victims, victim{gvr, it.GetName()})
		}
	}
	// List rather than trust b.nodes: setup may have failed half-way.
	nodes, err := b.kube.CoreV1().Nodes().List(ctx, sel)
	if err != nil {
		errs = append(errs, fmt.Errorf("list nodes: %w", err))
	} else {
		for _, n := range nodes.Items {
			victims = append(victims, victim{corev1.SchemeGroupVersion.WithResource("nodes"), n.Name})
		}
	}
	err = b.parallel(ctx, len(victims), func(ctx context.Context, i int) error {
		v := victims[i]
		var err error
		if v.gvr.Resource == "nodes" {
			err = b.kube.CoreV1().Nodes().Delete(ctx, v.name, metav1.DeleteOptions{})
		} else {
			err = b.dyn.Resource(v.gvr).Delete(ctx, v.name, metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s: %w", v.gvr.Resource, v.name, err)
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		logf("%s nodes: removed %d Nodes and heartbeat objects and namespace %s", b.label(), len(victims), b.ns)
	}
	return errors.Join(errs...)
}
