package devices

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"sextant.io/sextant/ranker/plugins/cycletest"

	"sextant.io/sextant/ranker/plugins/binder"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/silence"
)

// plugins builds DeviceAware over the topologies and node snapshot.
func plugins(t *testing.T, infos []*framework.NodeInfo, topos ...*v1alpha1.NodeTopology) *DeviceAware {
	t.Helper()
	return NewWith(cycletest.Heartbeats(topos...), cycletest.Snapshot(infos))
}

func picked(t *testing.T, state fwk.CycleState, node string) annotations.Allocation {
	t.Helper()
	s, ok := readState(state)
	if !ok {
		t.Fatal("no DeviceAware state")
	}
	a, _ := s.picks.get(node)
	return a
}

func TestPodRequest(t *testing.T) {
	p := cycletest.Pod("p", "1", map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 2, v1alpha1.KindNIC: 1}, nil)
	p.Spec.Containers[0].Resources.Limits["sextant.io/bandwidth"] = resource.MustParse("1") // not a device kind
	p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
		v1alpha1.KindGPU.ResourceName(): resource.MustParse("3"),
	}}}}
	got := PodRequest(p)
	want := Request{v1alpha1.KindGPU: 3, v1alpha1.KindNIC: 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("PodRequest = %v, want %v", got, want)
	}
	if got := PodRequest(cycletest.Pod("p", "1", nil, nil)); got != nil {
		t.Errorf("PodRequest without devices = %v, want nil", got)
	}
}

func TestFilter(t *testing.T) {
	four := []cycletest.Device{cycletest.GPU("0000:01:00.0", 0), cycletest.GPU("0000:02:00.0", 0), cycletest.GPU("0000:81:00.0", 1), cycletest.GPU("0000:82:00.0", 1)}
	twoGPUs := map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 2}
	for _, tc := range []struct {
		name       string
		topo       *v1alpha1.NodeTopology
		pods       []*v1.Pod
		req        map[v1alpha1.DeviceKind]int64
		wantCode   fwk.Code
		wantReason string
	}{
		{name: "no devices asked: skipped", topo: cycletest.Topology("n", 2, 4)},
		{name: "enough", topo: cycletest.Topology("n", 2, 4, four...), req: twoGPUs},
		{name: "no topology", req: twoGPUs, wantCode: fwk.UnschedulableAndUnresolvable, wantReason: "no NodeTopology"},
		{
			name: "unhealthy devices are never given", req: twoGPUs, wantCode: fwk.Unschedulable, wantReason: "sextant.io/gpu",
			topo: cycletest.Topology("n", 2, 4, cycletest.GPU("0000:01:00.0", 0), cycletest.Device{"0000:02:00.0", v1alpha1.KindGPU, 0, false}),
		},
		{
			name: "allocated by annotations", topo: cycletest.Topology("n", 2, 4, four...), req: twoGPUs,
			pods: []*v1.Pod{
				cycletest.On("n", cycletest.Pod("a", "", nil, cycletest.Allocated(v1alpha1.KindGPU, "0000:01:00.0", "0000:81:00.0"))),
				cycletest.On("n", cycletest.Pod("b", "", nil, cycletest.Allocated(v1alpha1.KindGPU, "0000:02:00.0"))),
			},
			wantCode: fwk.Unschedulable, wantReason: "sextant.io/gpu",
		},
		{
			name: "malformed annotation is ignored", topo: cycletest.Topology("n", 2, 4, four...), req: twoGPUs,
			pods: []*v1.Pod{
				cycletest.On("n", cycletest.Pod("a", "", nil, map[string]string{annotations.DevicesAllocated: "0000:01:00.0"})),
				cycletest.On("n", cycletest.Pod("b", "", nil, map[string]string{annotations.DevicesAllocated: `{"sextant.io/gpu":"0000:02:00.0"}`})),
			},
		},
		{
			// A pod another scheduler placed holds two GPUs without an annotation: the
			// kubelet's record (the holder) counts; one more is kept from pods.
			name: "held by a pod of another scheduler, or excluded", req: twoGPUs, wantCode: fwk.Unschedulable, wantReason: "sextant.io/gpu",
			topo: cycletest.WithDevice(cycletest.WithDevice(cycletest.WithDevice(cycletest.Topology("n", 2, 4, four...),
				"0000:01:00.0", func(d *v1alpha1.PCIDevice) { d.Holder = &v1alpha1.DeviceHolder{Namespace: "other", Name: "train"} }),
				"0000:02:00.0", func(d *v1alpha1.PCIDevice) { d.Holder = &v1alpha1.DeviceHolder{Namespace: "other", Name: "train"} }),
				"0000:81:00.0", func(d *v1alpha1.PCIDevice) { d.Excluded = "exclude:address=0000:81:00.0" }),
		},
		{
			name: "wrong kind", topo: cycletest.Topology("n", 2, 4, four...), req: map[v1alpha1.DeviceKind]int64{v1alpha1.KindNVMe: 1},
			wantCode: fwk.Unschedulable, wantReason: "sextant.io/nvme",
		},
		{
			name: "two kinds, one short", req: map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 1, v1alpha1.KindNIC: 2},
			topo:     cycletest.Topology("n", 2, 4, cycletest.GPU("0000:01:00.0", 0), cycletest.Device{"0000:03:00.0", v1alpha1.KindNIC, 0, true}),
			wantCode: fwk.Unschedulable, wantReason: "sextant.io/nic",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ni := cycletest.NodeInfo("n", tc.pods...)
			var topos []*v1alpha1.NodeTopology
			if tc.topo != nil {
				topos = append(topos, tc.topo)
			}
			dp := plugins(t, []*framework.NodeInfo{ni}, topos...)
			ctx := context.Background()
			state := cycletest.NewState()
			p := cycletest.Pod("p", "", tc.req, nil)
			_, st := dp.PreFilter(ctx, state, p, nil)
			if tc.req == nil {
				if st.Code() != fwk.Skip {
					t.Fatalf("PreFilter = %v, want Skip", st)
				}
				return
			}
			st = dp.Filter(ctx, state, p, ni)
			if st.Code() != tc.wantCode || !strings.Contains(st.Message(), tc.wantReason) {
				t.Errorf("Filter = %v, want %v mentioning %q", st, tc.wantCode, tc.wantReason)
			}
		})
	}
}

func TestFilterRejectionMetric(t *testing.T) {
	ni := cycletest.NodeInfo("n")
	dp := plugins(t, []*framework.NodeInfo{ni}, cycletest.Topology("n", 1, 1))
	before, _ := testutil.GetCounterMetricValue(filterRejections.WithLabelValues("insufficient_gpu"))
	state := cycletest.NewState()
	p := cycletest.Pod("p", "", map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 1}, nil)
	dp.PreFilter(context.Background(), state, p, nil)
	dp.Filter(context.Background(), state, p, ni)
	after, _ := testutil.GetCounterMetricValue(filterRejections.WithLabelValues("insufficient_gpu"))
	if after != before+1 {
		t.Errorf("sextant_ranker_device_filter_rejections_total{reason=insufficient_gpu} went %v -> %v, want +1", before, after)
	}
}

func TestPick(t *testing.T) {
	free := FreeDevices(cycletest.Topology("n", 4, 1,
		cycletest.GPU("0000:01:00.0", 0),
		cycletest.GPU("0000:41:00.0", 1), cycletest.GPU("0000:42:00.0", 1), cycletest.GPU("0000:43:00.0", 1),
		cycletest.GPU("0000:81:00.0", 2), cycletest.GPU("0000:82:00.0", 2),
		cycletest.GPU("0000:c1:00.0", -1),
		cycletest.Device{"0000:d1:00.0", v1alpha1.KindGPU, 3, false},
	), nil, nil)
	for _, tc := range []struct {
		name      string
		n         int64
		preferred []int32
		// pinned: preferred is the NUMA set NUMAAware chose, which the pod is pinned to.
		pinned bool
		want   []string
		wantOK bool
	}{
		{name: "preferred first", n: 1, preferred: []int32{2}, want: []string{"0000:81:00.0"}, wantOK: true},
		{name: "one NUMA node that fits exactly wins over a larger one", n: 2, want: []string{"0000:81:00.0", "0000:82:00.0"}, wantOK: true},
		{name: "largest NUMA node when none fits alone", n: 4, want: []string{"0000:01:00.0", "0000:41:00.0", "0000:42:00.0", "0000:43:00.0"}, wantOK: true},
		{name: "preferred, then fewest others", n: 3, preferred: []int32{0}, want: []string{"0000:01:00.0", "0000:81:00.0", "0000:82:00.0"}, wantOK: true},
		{name: "unknown locality last, unhealthy never", n: 7, want: []string{"0000:01:00.0", "0000:41:00.0", "0000:42:00.0", "0000:43:00.0", "0000:81:00.0", "0000:82:00.0", "0000:c1:00.0"}, wantOK: true},
		{name: "too few", n: 8},
		{name: "not pinned: other NUMA nodes before unknown locality", n: 2, preferred: []int32{0}, want: []string{"0000:01:00.0", "0000:81:00.0"}, wantOK: true},
		{name: "pinned: unknown locality before other NUMA nodes", n: 2, preferred: []int32{0}, pinned: true, want: []string{"0000:01:00.0", "0000:c1:00.0"}, wantOK: true},
		{name: "pinned: other NUMA nodes once unknown locality runs out", n: 3, preferred: []int32{0}, pinned: true, want: []string{"0000:01:00.0", "0000:81:00.0", "0000:c1:00.0"}, wantOK: true},
		{name: "pinned, nothing in the set: unknown locality first", n: 1, preferred: []int32{3}, pinned: true, want: []string{"0000:c1:00.0"}, wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Pick(free, Request{v1alpha1.KindGPU: tc.n}.Want(), tc.preferred, tc.pinned)
			if ok != tc.wantOK || !slices.Equal(got["sextant.io/gpu"], tc.want) {
				t.Errorf("Pick = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// Shortfall and FromPreferred run for every node a device pod is checked on: right
// answers, and no allocation.
func TestShortfallAndFromPreferred(t *testing.T) {
	free := FreeDevices(cycletest.Topology("n", 2, 1,
		cycletest.GPU("0000:01:00.0", 0), cycletest.GPU("0000:02:00.0", 0), cycletest.GPU("0000:41:00.0", 1),
		cycletest.Device{"0000:51:00.0", v1alpha1.KindNVMe, 1, true},
	), nil, nil)
	for _, tc := range []struct {
		name      string
		req       Request
		wantShort v1alpha1.DeviceKind
		preferred []int32
		wantFrom  int64
	}{
		{name: "fits", req: Request{v1alpha1.KindGPU: 3, v1alpha1.KindNVMe: 1}, preferred: []int32{0}, wantFrom: 2},
		{name: "too few of the second kind", req: Request{v1alpha1.KindGPU: 1, v1alpha1.KindNVMe: 2}, wantShort: v1alpha1.KindNVMe, preferred: []int32{1}, wantFrom: 2},
		{name: "a kind the node lacks", req: Request{v1alpha1.KindAccelerator: 1}, wantShort: v1alpha1.KindAccelerator, preferred: []int32{0, 1}},
		{name: "zero counts ask for nothing", req: Request{v1alpha1.KindGPU: 0, v1alpha1.KindNIC: 0}, preferred: []int32{0}},
	} {
		want := tc.req.Want()
		kind, short := Shortfall(free, want)
		if short != (tc.wantShort != "") || kind != tc.wantShort {
			t.Errorf("%s: Shortfall = %q, %v; want %q", tc.name, kind, short, tc.wantShort)
		}
		if got := FromPreferred(free, want, tc.preferred); got != tc.wantFrom {
			t.Errorf("%s: FromPreferred = %d, want %d", tc.name, got, tc.wantFrom)
		}
		if n := testing.AllocsPerRun(20, func() {
			Shortfall(free, want)
			FromPreferred(free, want, tc.preferred)
		}); n != 0 {
			t.Errorf("%s: %v allocations, want 0", tc.name, n)
		}
	}
}

func TestReserveUnreserve(t *testing.T) {
	topo := cycletest.Topology("n", 2, 4, cycletest.GPU("0000:01:00.0", 0), cycletest.GPU("0000:81:00.0", 1))
	ni := cycletest.NodeInfo("n")
	dp := plugins(t, []*framework.NodeInfo{ni}, topo)
	ctx := context.Background()
	one := map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 1}

	first := cycletest.Pod("first", "", one, nil)
	r1 := cycletest.Schedule(t, first, []*framework.NodeInfo{ni}, dp)
	ni.AddPod(cycletest.On("n", first.DeepCopy())) // assumed, not annotated yet
	second := cycletest.Pod("second", "", one, nil)
	r2 := cycletest.Schedule(t, second, []*framework.NodeInfo{ni}, dp)
	ni.AddPod(cycletest.On("n", second.DeepCopy()))
	a1, a2 := picked(t, r1.State, "n"), picked(t, r2.State, "n")
	if a1.String() == a2.String() {
		t.Fatalf("both pods got %s", a1)
	}
	third := cycletest.Pod("third", "", one, nil)
	state := cycletest.NewState()
	dp.PreFilter(ctx, state, third, nil)
	if st := dp.Filter(ctx, state, third, ni); st.Code() != fwk.Unschedulable {
		t.Fatalf("third pod: Filter = %v, want Unschedulable (both GPUs reserved)", st)
	}
	if st := dp.Reserve(ctx, state, third, "n"); st.Code() != fwk.Unschedulable {
		t.Fatalf("third pod: Reserve = %v, want Unschedulable", st)
	}
	dp.Unreserve(ctx, r1.State, first, "n")
	dp.Unreserve(ctx, r1.State, first, "n") // idempotent
	if _, staged := binder.Staged(r1.State)[annotations.DevicesAllocated]; staged {
		t.Errorf("the allocation is still staged for the Binding after Unreserve")
	}
	if _, held := dp.ledger.Get(first.UID, "n"); held {
		t.Fatal("Unreserve left the reservation in the ledger")
	}
	// As the scheduler does right after Unreserve: forget the assumed pod.
	if err := ni.RemovePod(klog.Background(), cycletest.On("n", first.DeepCopy())); err != nil {
		t.Fatal(err)
	}
	if st := dp.Filter(ctx, state, third, ni); !st.IsSuccess() {
		t.Fatalf("after Unreserve: Filter = %v, want success", st)
	}
	if st := dp.Reserve(ctx, state, third, "n"); !st.IsSuccess() {
		t.Fatalf("after Unreserve: Reserve = %v", st)
	}
	if got := picked(t, state, "n"); got.String() != a1.String() {
		t.Errorf("third pod got %s, want the released %s", got, a1)
	}
}

// TestReserveStagesForTheBinding: Reserve stages devices.sextant.io/allocated for
// SextantBinder's Binding; without a SextantBinder in the profile it fails rather than
// pick devices no node would hand out.
func TestReserveStagesForTheBinding(t *testing.T) {
	for _, tc := range []struct {
		name     string
		req      map[v1alpha1.DeviceKind]int64
		noBinder bool
		wantCode fwk.Code
		want     string
	}{
		{name: "stages the allocation", req: map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 1, v1alpha1.KindNIC: 1},
			want: `{"sextant.io/gpu":["0000:01:00.0"],"sextant.io/nic":["0000:03:00.0"]}`},
		{name: "no devices: nothing"},
		{name: "no SextantBinder: an error", req: map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 1}, noBinder: true, wantCode: fwk.Error},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := cycletest.Topology("n", 1, 4, cycletest.GPU("0000:01:00.0", 0), cycletest.Device{"0000:03:00.0", v1alpha1.KindNIC, 0, true})
			ni := cycletest.NodeInfo("n")
			dp := plugins(t, []*framework.NodeInfo{ni}, topo)
			ctx := context.Background()
			p := cycletest.Pod("p", "", tc.req, nil)
			state := cycletest.NewState()
			if tc.noBinder {
				state = framework.NewCycleState()
			}
			if _, st := dp.PreFilter(ctx, state, p, nil); !st.IsSuccess() && !st.IsSkip() {
				t.Fatalf("PreFilter: %v", st)
			}
			st := dp.Reserve(ctx, state, p, "n")
			if st.Code() != tc.wantCode {
				t.Fatalf("Reserve = %v, want %v", st, tc.wantCode)
			}
			if tc.wantCode == fwk.Error {
				if !strings.Contains(st.Message(), "SextantBinder") {
					t.Errorf("message %q does not name SextantBinder", st.Message())
				}
				return
			}
			if got := binder.Staged(state)[annotations.DevicesAllocated]; got != tc.want {
				t.Errorf("staged %s=%q, want %q", annotations.DevicesAllocated, got, tc.want)
			}
		})
	}
}

// New must be usable as app.WithPlugin(Name, New).
var _ frameworkruntime.PluginFactory = New

// TestFilterSilentAgent: a node whose agent has not been heard from (no NodeBandwidth,
// or one that arrived more than silence.After ago, on the ranker's clock) gets no
// new device placements, whatever its NodeTopology says.
func TestFilterSilentAgent(t *testing.T) {
	now := time.Date(2026, 11, 25, 4, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		received time.Duration // before now; < 0: no NodeBandwidth
		wantCode fwk.Code
	}{
		{"heard just now", 0, fwk.Success},
		{"heard within the bound", silence.After - time.Second, fwk.Success},
		{"silent past the bound", silence.After + time.Second, fwk.UnschedulableAndUnresolvable},
		{"never heard", -1, fwk.UnschedulableAndUnresolvable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := heartbeat.NewFromObjects(cycletest.Topology("n", 1, 4, cycletest.GPU("0000:01:00.0", 0)))
			if tc.received >= 0 {
				store.PutAt(&v1alpha1.NodeBandwidth{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, now.Add(-tc.received))
			}
			ni := cycletest.NodeInfo("n")
			dp := NewWith(store, func(string) (fwk.NodeInfo, error) { return ni, nil })
			dp.now = func() time.Time { return now }
			state := cycletest.NewState()
			p := cycletest.Pod("p", "", map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 1}, nil)
			if _, st := dp.PreFilter(context.Background(), state, p, nil); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			st := dp.Filter(context.Background(), state, p, ni)
			if st.Code() != tc.wantCode {
				t.Fatalf("Filter = %v, want %v", st, tc.wantCode)
			}
			if tc.wantCode != fwk.Success && st.Message() != msgSilentAgent {
				t.Errorf("message %q, want %q", st.Message(), msgSilentAgent)
			}
		})
	}
	if want := "node(s) had no agent heartbeat (NodeBandwidth) within the last " + silence.After.String() + ": their devices are not placed"; msgSilentAgent != want {
		t.Errorf("msgSilentAgent %q does not name silence.After (%q)", msgSilentAgent, want)
	}
}

// A kind that maps to a DeviceClass (KEP-5004) is the device plugin's on a node whose
// allocatable advertises it and DynamicResources' on one that does not: there Filter
// does not count it, Score has nothing to prefer, and Reserve picks and stages nothing
// for it.
func TestKindsGivenThroughDRA(t *testing.T) {
	gpus := map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 1}
	for _, tc := range []struct {
		name        string
		allocatable bool // the node's device plugin advertises sextant.io/gpu
		mapped      bool // a DeviceClass maps sextant.io/gpu
		wantFilter  fwk.Code
		wantStaged  string
	}{
		{name: "through DRA", mapped: true, wantFilter: fwk.Success},
		{name: "device plugin, though mapped", mapped: true, allocatable: true, wantFilter: fwk.Unschedulable},
		{name: "not mapped", wantFilter: fwk.Unschedulable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The node's only GPU is held by another pod: none free for the plugin.
			topo := cycletest.Topology("n", 1, 4, cycletest.GPU("0000:01:00.0", 0))
			topo.Status.PCIDevices[0].Excluded = "served through DRA"
			ni := cycletest.NodeInfo("n")
			if tc.allocatable {
				ni.Node().Status.Allocatable = v1.ResourceList{v1alpha1.KindGPU.ResourceName(): resource.MustParse("1")}
			}
			dp := plugins(t, []*framework.NodeInfo{ni}, topo)
			if tc.mapped {
				dp.resolver = classFor(v1alpha1.KindGPU.ResourceName())
			}
			ctx := context.Background()
			p := cycletest.Pod("p", "", gpus, nil)
			state := cycletest.NewState()
			if _, st := dp.PreFilter(ctx, state, p, nil); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			if st := dp.Filter(ctx, state, p, ni); st.Code() != tc.wantFilter {
				t.Fatalf("Filter = %v, want %v", st, tc.wantFilter)
			}
			if tc.wantFilter != fwk.Success {
				return
			}
			if score, st := dp.Score(ctx, state, p, ni); !st.IsSuccess() || score != fwk.MaxNodeScore {
				t.Errorf("Score = %d, %v; want %d", score, st, fwk.MaxNodeScore)
			}
			if st := dp.Reserve(ctx, state, p, "n"); !st.IsSuccess() {
				t.Fatalf("Reserve = %v", st)
			}
			if got, ok := binder.Staged(state)[annotations.DevicesAllocated]; ok {
				t.Errorf("staged %s=%q, want nothing", annotations.DevicesAllocated, got)
			}
		})
	}
}

// classFor maps the resources to a DeviceClass, as a DeviceClass's
// extendedResourceName does.
type classFor v1.ResourceName

func (c classFor) GetDeviceClass(name v1.ResourceName) *resourceapi.DeviceClass {
	if name != v1.ResourceName(c) {
		return nil
	}
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.sextant.io"}}
}
