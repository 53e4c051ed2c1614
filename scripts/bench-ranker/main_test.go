package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	sextantv1 "sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
)

func TestNUMANeeded(t *testing.T) {
	for _, tc := range []struct {
		cpu, mem int64
		want     int
	}{
		{0, 0, 0},
		{500, 256 << 20, 1},
		{16000, 64 << 30, 1},
		{16001, 1 << 30, 2},
		{2000, 65 << 30, 2},
	} {
		if got := numaNeeded(podSpec{milliCPU: tc.cpu, memory: tc.mem}, shapes[defaultShape]); got != tc.want {
			t.Errorf("numaNeeded(%d m, %d B) = %d, want %d", tc.cpu, tc.mem, got, tc.want)
		}
	}
}

func TestBestEffortPlace(t *testing.T) {
	free := [][2]int64{{16000, 64 << 30}, {16000, 64 << 30}}
	// 10 CPUs fit one NUMA node.
	if got := bestEffortPlace(free, 10000, 8<<30); got != 1 {
		t.Fatalf("first pod used %d NUMA nodes, want 1", got)
	}
	// Best fit: 6 CPUs go where 6 are left, not onto the empty NUMA node.
	if got := bestEffortPlace(free, 6000, 1<<30); got != 1 {
		t.Fatalf("second pod used %d NUMA nodes, want 1", got)
	}
	if free[0][0] != 0 || free[1][0] != 16000 {
		t.Fatalf("best fit left %v, want NUMA node 0 full and 1 empty", free)
	}
	// 20 CPUs need both, and take what is there.
	if got := bestEffortPlace(free, 12000, 1<<30); got != 1 {
		t.Fatalf("third pod used %d NUMA nodes, want 1", got)
	}
	if got := bestEffortPlace(free, 5000, 1<<30); got != 2 {
		t.Fatalf("fourth pod used %d NUMA nodes, want 2 (4 CPUs are left on one, 0 on the other)", got)
	}
}

func TestAnalyseCountsCumulativeBandwidth(t *testing.T) {
	b := &bench{
		shape:     shapes[defaultShape],
		remaining: map[string][][2]int64{"n1": {{1_000_000_000, 0}}},
		workload: []podSpec{
			{milliCPU: 100, required: [2]int64{600_000_000, 0}},
			{milliCPU: 100, required: [2]int64{600_000_000, 0}}, // 1.2G > 1G: a violation
			{milliCPU: 100, expected: [2]int64{0, 100_000_000}}, // expected only: never one
			{milliCPU: 100, required: [2]int64{0, 1}},           // egress 0 left: a violation
		},
	}
	bindings := []binding{
		{seq: 3, pod: 3, node: "n1"},
		{seq: 0, pod: 0, node: "n1", hasNUMA: true, numaNodes: "0"},
		{seq: 1, pod: 1, node: "n1", hasNUMA: true, numaNodes: "0,1"},
		{seq: 2, pod: 2, node: "n1"},
	}
	var res result
	b.analyse(&res, bindings, true)
	if res.bwViolation != 2 || res.bwAsked != 3 {
		t.Errorf("violations %d of %d asking, want 2 of 3", res.bwViolation, res.bwAsked)
	}
	if res.numaSpread != 1 || res.numaMissing != 2 || res.numaPods != 4 {
		t.Errorf("NUMA spread %d, missing %d, pods %d; want 1, 2, 4", res.numaSpread, res.numaMissing, res.numaPods)
	}
}

func TestWorkloadIsSeeded(t *testing.T) {
	a, b := makeWorkload(7, 1000, 2), makeWorkload(7, 1000, 2)
	kinds := map[string]int{}
	withBW := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("pod %d differs between two workloads of the same seed", i)
		}
		kinds[a[i].kind]++
		if a[i].required != [2]int64{} || a[i].expected != [2]int64{} {
			withBW++
		}
	}
	if kinds["gpu"] < 50 || kinds["numa"] < 200 || withBW < 400 || withBW > 600 {
		t.Errorf("mix off: %v, %d with bandwidth", kinds, withBW)
	}
}

func TestSummarizeMetrics(t *testing.T) {
	text := strings.Join([]string{
		`# HELP scheduler_framework_extension_point_duration_seconds x`,
		`scheduler_framework_extension_point_duration_seconds_sum{extension_point="PreBind",profile="p",status="Success"} 3`,
		`scheduler_framework_extension_point_duration_seconds_count{extension_point="PreBind",profile="p",status="Success"} 2`,
		`scheduler_framework_extension_point_duration_seconds_sum{extension_point="PreBind",profile="p",status="Error"} 1`,
		`scheduler_scheduling_attempt_duration_seconds_sum{profile="p",result="scheduled"} 2`,
		`scheduler_scheduling_attempt_duration_seconds_count{profile="p",result="scheduled"} 4`,
		`scheduler_plugin_execution_duration_seconds_sum{extension_point="Filter",plugin="BandwidthAware",status="Success"} 0.001`,
		`scheduler_plugin_execution_duration_seconds_count{extension_point="Filter",plugin="BandwidthAware",status="Success"} 1000`,
		`rest_client_requests_total{code="201",host="h",method="POST"} 8`,
		`rest_client_requests_total{code="200",host="h",method="PATCH"} 4`,
		`rest_client_requests_total{code="200",host="h",method="GET"} 100`,
	}, "\n")
	got := summarizeMetrics(text, 4)
	for _, want := range []string{"scheduled 4 (mean 500ms)", "PreBind 4.0s", "BandwidthAware/Filter 1µs", "per bound pod (events included): 3.00 (POST 8, PATCH 4)"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis; utime 1234, stime 66 ticks.
	stat := "4242 (kube sched)) S 1 4242 4242 0 -1 4194560 9000 0 0 0 1234 66 0 0 20 0 30 0 100 0"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 13 * time.Second; got != want {
		t.Errorf("parseStatCPU = %s, want %s", got, want)
	}
	if _, err := parseStatCPU("4242 (x) S 1 2"); err == nil {
		t.Error("a short stat line must fail")
	}
	// The kernel counts CPU time in 10 ms ticks: spin until this process has used some
	// (a few ticks at most), and it must be read back as more than zero.
	var own time.Duration
	sum := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		for i := range 1_000_000 {
			sum += i
		}
		if own, err = processCPU(os.Getpid()); err != nil || own > 0 {
			break
		}
	}
	if err != nil || own <= 0 {
		t.Errorf("processCPU(self) = %s, %v after spinning (sum %d); want > 0", own, err, sum)
	}
}

func TestParseStatusPeakRSS(t *testing.T) {
	status := "Name:\tkube-scheduler\nVmPeak:\t 2000000 kB\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n"
	got, err := parseStatusPeakRSS(status)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(200 << 20); got != want {
		t.Errorf("parseStatusPeakRSS = %d, want %d", got, want)
	}
	for _, bad := range []string{"Name:\tx\n", "VmHWM:\t12 MB\n", "VmHWM:\tlots kB\n"} {
		if _, err := parseStatusPeakRSS(bad); err == nil {
			t.Errorf("parseStatusPeakRSS(%q) did not fail", bad)
		}
	}
	// This process has touched memory: its own peak must read back as more than zero.
	own, err := processPeakRSS(os.Getpid())
	if err != nil || own <= 0 {
		t.Errorf("own peak RSS = %d, %v; want > 0", own, err)
	}
}

// The bench runs sextant-ranker with the GC environment the chart gives its container.
func TestChartRankerGCEnv(t *testing.T) {
	env, err := chartRankerGCEnv("../../charts/sextant")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../charts/sextant/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Ranker struct {
			GC struct {
				Percent int `json:"percent"`
			} `json:"gc"`
		} `json:"ranker"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("GOGC=%d", values.Ranker.GC.Percent); !slices.Contains(env, want) {
		t.Errorf("chart env %v, want %s", env, want)
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GOMEMLIMIT=") }) {
		t.Errorf("chart env %v, want a GOMEMLIMIT", env)
	}
	if _, err := parseEnv("GOGC=200,=3"); err == nil || !strings.Contains(err.Error(), "NAME=VALUE") {
		t.Errorf("parseEnv of a nameless entry: %v, want an error naming the accepted form", err)
	}
}

// The goal is judged on the median of the rounds' ratios, violations on their sum; one
// round prints as before.
func TestPrintResultsRounds(t *testing.T) {
	// sextant's peak memory is 1.2x vanilla's, its live heap 1.5x.
	run := func(sched string, round int, podsPerSec float64, violations int) result {
		rss, live := int64(250<<20), int64(100<<20)
		if sched == schedSextant {
			rss, live = 300<<20, 150<<20
		}
		return result{scheduler: sched, size: 5000, round: round, pods: 10, bound: 10, podsPerSec: podsPerSec,
			cpuPerPod: time.Duration(float64(time.Second) / podsPerSec), bwViolation: violations, peakRSS: rss, liveHeap: live, measured: true}
	}
	for _, tc := range []struct {
		name    string
		results []result
		want    []string
	}{
		{"one round", []result{run(schedSextant, 0, 270, 0), run(schedVanilla, 0, 300, 7)},
			[]string{"throughput ratio sextant/vanilla 0.900;", "violations 0, NUMA spread 0 (vanilla 7, 0)", "peak memory sextant/vanilla 1.200; live heap sextant/vanilla 1.500",
				"goal ratio >= 0.80: PASS; goal peak memory <= 1.5x: PASS; goal zero sextant violations: PASS", "\nsextant ", "300MiB    150MiB"}},
		{"median of three rounds passes", []result{
			run(schedSextant, 0, 200, 0), run(schedVanilla, 0, 300, 1),
			run(schedVanilla, 1, 300, 1), run(schedSextant, 1, 291, 0),
			run(schedSextant, 2, 288, 0), run(schedVanilla, 2, 300, 1)},
			[]string{"sextant/vanilla median 0.960 (rounds 0.667 0.970 0.960)", "(vanilla 3, 0)", "goal ratio >= 0.80: PASS", "sextant#2 ", "vanilla#3 "}},
		{"peak memory over the goal", func() []result {
			s, v := run(schedSextant, 0, 300, 0), run(schedVanilla, 0, 300, 0)
			s.peakRSS = 2 * v.peakRSS
			return []result{s, v}
		}(), []string{"peak memory sextant/vanilla 2.000", "goal ratio >= 0.80: PASS; goal peak memory <= 1.5x: MISS"}},
		{"ranker-default too", []result{run(schedSextant, 0, 270, 0), run(schedVanilla, 0, 300, 7), run(schedRankerDefault, 0, 330, 7)},
			[]string{"throughput ratio ranker-default/vanilla 1.100, CPU per bound pod 0.909"}},
		{"median of two rounds misses", []result{
			run(schedSextant, 0, 200, 0), run(schedVanilla, 0, 300, 0),
			run(schedVanilla, 1, 300, 0), run(schedSextant, 1, 270, 1)},
			[]string{"median 0.783 (rounds 0.667 0.900)", "goal ratio >= 0.80: MISS; goal peak memory <= 1.5x: PASS; goal zero sextant violations: MISS"}},
	} {
		var out strings.Builder
		printResults(&out, tc.results)
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out.String())
			}
		}
	}
}

// The ceiling is what a scheduler can bind at most under the client's limiter: the
// burst at once, the rest at the QPS.
func TestLimiterCeiling(t *testing.T) {
	for _, tc := range []struct {
		bound, qps int
		want       float64
	}{
		{5000, 300, 5000 / (4700.0 / 300)},
		{5000, 1000, 1250},
		{300, 300, 0}, // the burst covers every Binding
		{5000, 0, 0},
	} {
		if got := limiterCeiling(tc.bound, tc.qps); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("limiterCeiling(%d, %d) = %v, want %v", tc.bound, tc.qps, got, tc.want)
		}
	}
	if got := limiterCeiling(5000, 300); got < 319 || got > 319.2 {
		t.Errorf("limiterCeiling(5000, 300) = %.2f, want the 319.1 pods/s measured", got)
	}
}

// decodeTopology runs the bench's NodeTopology through the ranker's own decoder, which
// holds back any the plugins could not use.
func decodeTopology(t *testing.T, shape nodeShape) *sextantv1.NodeTopology {
	t.Helper()
	obj := &sextantv1.NodeTopology{
		TypeMeta:   metav1.TypeMeta{APIVersion: sextantv1.GroupVersion.String(), Kind: "NodeTopology"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status:     topologyStatus(time.Now(), shape),
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	nt, err := heartbeat.DecodeTopology(&unstructured.Unstructured{Object: m})
	if err != nil {
		t.Fatalf("%s: the ranker rejects the bench's NodeTopology: %v", shape.name, err)
	}
	return nt
}

func TestShapeEightNUMAEightGPU(t *testing.T) {
	shape, ok := shapes["8numa-8gpu"]
	if !ok {
		t.Fatal("no shape 8numa-8gpu")
	}
	nt := decodeTopology(t, shape)
	topo := nt.Status.Topology
	if len(topo.NUMANodes) != 8 {
		t.Fatalf("%d NUMA nodes, want 8", len(topo.NUMANodes))
	}
	var cpus int
	var mem int64
	for i, n := range topo.NUMANodes {
		if n.ID != int32(i) {
			t.Errorf("NUMA node %d has ID %d", i, n.ID)
		}
		cpus += len(n.CPUs)
		mem += n.MemoryBytes
		if len(n.Distances) != 8 {
			t.Fatalf("NUMA node %d: %d distances, want 8", i, len(n.Distances))
		}
		for j, d := range n.Distances {
			if back := topo.NUMANodes[j].Distances[i]; back != d {
				t.Errorf("distance %d→%d is %d, %d→%d is %d", i, j, d, j, i, back)
			}
			want := int32(32)
			switch {
			case i == j:
				want = 10
			case i/4 == j/4:
				want = 12
			}
			if d != want {
				t.Errorf("distance %d→%d is %d, want %d", i, j, d, want)
			}
		}
	}
	if s := nt.Status.Summary; s == nil || s.NUMANodes != 8 || int(s.CPUs) != cpus {
		t.Errorf("summary %+v, want 8 NUMA nodes and %d CPUs", s, cpus)
	}
	gpusOn := map[int32]int{}
	for _, d := range topo.PCIDevices {
		if d.Kind != sextantv1.KindGPU {
			continue
		}
		if d.Health != sextantv1.Healthy || d.NUMANode == nil {
			t.Errorf("GPU %s: health %q, NUMA node %v; want healthy with a NUMA node", d.Address, d.Health, d.NUMANode)
			continue
		}
		gpusOn[*d.NUMANode]++
	}
	if len(gpusOn) != 8 {
		t.Errorf("GPUs on NUMA nodes %v, want one on each of 8", gpusOn)
	}
	for n, c := range gpusOn {
		if c != 1 {
			t.Errorf("%d GPUs on NUMA node %d, want 1", c, n)
		}
	}

	// The Node advertises what the topology has.
	if resourceGPU != sextantv1.KindGPU.ResourceName() {
		t.Fatalf("bench GPU resource %s, the ranker's %s", resourceGPU, sextantv1.KindGPU.ResourceName())
	}
	alloc := benchNode("n1", "r", shape).Status.Allocatable
	for res, want := range map[corev1.ResourceName]int64{
		sextantv1.KindGPU.ResourceName(): 8,
		corev1.ResourceCPU:               int64(cpus),
		corev1.ResourceMemory:            mem,
	} {
		if q := alloc[res]; q.Value() != want {
			t.Errorf("allocatable %s = %s, want %d", res, q.String(), want)
		}
	}
	if cpus != 128 || mem != 512<<30 {
		t.Errorf("%d CPUs, %d bytes; want 128 and 512 GiB (8 NUMA nodes as 2numa's)", cpus, mem)
	}
}

// The default shape is what the bench measured before there were shapes.
func TestShapeDefaultUnchanged(t *testing.T) {
	shape := shapes[defaultShape]
	topo := decodeTopology(t, shape).Status.Topology
	if len(topo.NUMANodes) != 2 || len(topo.NUMANodes[0].CPUs) != 16 || topo.NUMANodes[1].MemoryBytes != 64<<30 {
		t.Fatalf("NUMA nodes %+v, want 2 of 16 CPUs and 64 GiB", topo.NUMANodes)
	}
	if d := topo.NUMANodes[0].Distances; !slices.Equal(d, []int32{10, 21}) {
		t.Errorf("distances of NUMA node 0: %v, want [10 21]", d)
	}
	var on []int32
	for _, d := range topo.PCIDevices {
		if d.Kind == sextantv1.KindGPU {
			on = append(on, *d.NUMANode)
		}
	}
	if !slices.Equal(on, []int32{0, 0, 1, 1}) {
		t.Errorf("GPUs on NUMA nodes %v, want [0 0 1 1]", on)
	}
	alloc := benchNode("n1", "r", shape).Status.Allocatable
	if q := alloc[resourceGPU]; q.Value() != 4 {
		t.Errorf("allocatable GPUs %s, want 4", q.String())
	}
	if q := alloc[corev1.ResourceCPU]; q.Value() != 32 {
		t.Errorf("allocatable CPU %s, want 32", q.String())
	}
}

func TestParseShapes(t *testing.T) {
	got, err := parseShapes("2numa, 8numa-8gpu")
	if err != nil || len(got) != 2 || got[0].name != "2numa" || got[1].name != "8numa-8gpu" {
		t.Errorf("parseShapes = %v, %v", got, err)
	}
	for _, bad := range []string{"4numa", "2numa,2numa", ""} {
		if _, err := parseShapes(bad); err == nil {
			t.Errorf("parseShapes(%q) did not fail", bad)
		}
	}
}

// In the 8-NUMA shape GPU pods ask for 1 to 4 GPUs; every other pod is the same as in
// the 2-NUMA shape's workload.
func TestWorkloadGPUs(t *testing.T) {
	two, eight := makeWorkload(1, 5000, shapes["2numa"].gpuPodMax), makeWorkload(1, 5000, shapes["8numa-8gpu"].gpuPodMax)
	counts := map[int64]int{}
	gpuPods := 0
	for i := range eight {
		if eight[i].kind != two[i].kind {
			t.Fatalf("pod %d is %s in one workload, %s in the other", i, eight[i].kind, two[i].kind)
		}
		if eight[i].kind != "gpu" {
			if eight[i] != two[i] {
				t.Fatalf("non-GPU pod %d differs between the shapes' workloads", i)
			}
			continue
		}
		gpuPods++
		counts[eight[i].gpus]++
		if two[i].gpus < 1 || two[i].gpus > 2 {
			t.Errorf("2numa pod %d asks for %d GPUs", i, two[i].gpus)
		}
	}
	for n := int64(1); n <= 4; n++ {
		if counts[n] == 0 {
			t.Errorf("no GPU pod asks for %d GPUs: %v", n, counts)
		}
	}
	if len(counts) != 4 {
		t.Errorf("GPU counts %v, want 1-4 only", counts)
	}
	if gpuPods < 400 || gpuPods > 600 {
		t.Errorf("%d GPU pods of 5000, want about a tenth", gpuPods)
	}
}

// The NUMA spread analysis places pods on the shape's NUMA nodes: eight pods of 16
// CPUs on one node spread on 2 NUMA nodes from the third pod on, not on 8.
func TestAnalyseUsesShape(t *testing.T) {
	for _, tc := range []struct {
		shape      string
		wantSpread int
	}{{"2numa", 6}, {"8numa-8gpu", 0}} {
		b := &bench{shape: shapes[tc.shape], remaining: map[string][][2]int64{"n1": {{}}}}
		var bindings []binding
		for i := range 8 {
			b.workload = append(b.workload, podSpec{milliCPU: 16000, memory: 1 << 30})
			bindings = append(bindings, binding{seq: i, pod: i, node: "n1"})
		}
		var res result
		b.analyse(&res, bindings, false)
		if res.numaSpread != tc.wantSpread || res.numaPods != 8 {
			t.Errorf("%s: spread %d of %d, want %d of 8", tc.shape, res.numaSpread, res.numaPods, tc.wantSpread)
		}
	}
	if got := numaNeeded(podSpec{milliCPU: 40000, memory: 1 << 30}, shapes["8numa-8gpu"]); got != 3 {
		t.Errorf("40 CPUs need %d NUMA nodes of 8numa-8gpu, want 3", got)
	}
	// One GPU per NUMA node on 8numa-8gpu, two on 2numa.
	for _, tc := range []struct {
		shape string
		gpus  int64
		want  int
	}{{"8numa-8gpu", 1, 1}, {"8numa-8gpu", 3, 3}, {"8numa-8gpu", 4, 4}, {"2numa", 2, 1}} {
		if got := numaNeeded(podSpec{milliCPU: 1000, memory: 1 << 30, gpus: tc.gpus}, shapes[tc.shape]); got != tc.want {
			t.Errorf("%d GPUs need %d NUMA nodes of %s, want %d", tc.gpus, got, tc.shape, tc.want)
		}
	}
}

// A piece of a real sextant-ranker's /metrics (with the Score extension point's own
// duration, timed every cycle).
const metricsFixture = `# HELP scheduler_plugin_execution_duration_seconds [ALPHA] Duration for running a plugin at a specific extension point.
# TYPE scheduler_plugin_execution_duration_seconds histogram
scheduler_plugin_execution_duration_seconds_bucket{extension_point="Score",plugin="NUMAAware",status="Success",le="1e-05"} 900
scheduler_plugin_execution_duration_seconds_bucket{extension_point="Score",plugin="NUMAAware",status="Success",le="+Inf"} 1000
scheduler_plugin_execution_duration_seconds_sum{extension_point="Score",plugin="NUMAAware",status="Success"} 0.0031
scheduler_plugin_execution_duration_seconds_count{extension_point="Score",plugin="NUMAAware",status="Success"} 1000
scheduler_plugin_execution_duration_seconds_sum{extension_point="Score",plugin="DeviceAware",status="Success"} 0.00012
scheduler_plugin_execution_duration_seconds_count{extension_point="Score",plugin="DeviceAware",status="Success"} 90
scheduler_plugin_execution_duration_seconds_sum{extension_point="Score",plugin="DeviceAware",status="Error"} 0.00003
scheduler_plugin_execution_duration_seconds_count{extension_point="Score",plugin="DeviceAware",status="Error"} 10
scheduler_plugin_execution_duration_seconds_sum{extension_point="Score",plugin="BandwidthAware",status="Success"} 0.0008
scheduler_plugin_execution_duration_seconds_count{extension_point="Score",plugin="BandwidthAware",status="Success"} 1000
scheduler_plugin_execution_duration_seconds_sum{extension_point="Score",plugin="NodeResourcesFit",status="Success"} 0.002
scheduler_plugin_execution_duration_seconds_count{extension_point="Score",plugin="NodeResourcesFit",status="Success"} 1000
scheduler_plugin_execution_duration_seconds_sum{extension_point="Filter",plugin="NUMAAware",status="Success"} 0.0005
scheduler_plugin_execution_duration_seconds_count{extension_point="Filter",plugin="NUMAAware",status="Success"} 2000
scheduler_plugin_execution_duration_seconds_sum{extension_point="Filter",plugin="BandwidthAware",status="Unschedulable"} 0.00000081
scheduler_plugin_execution_duration_seconds_count{extension_point="Filter",plugin="BandwidthAware",status="Unschedulable"} 3
scheduler_plugin_execution_duration_seconds_sum{extension_point="PreScore",plugin="NUMAAware",status="Success"} 5
scheduler_plugin_execution_duration_seconds_count{extension_point="PreScore",plugin="NUMAAware",status="Success"} 1
scheduler_framework_extension_point_duration_seconds_sum{extension_point="Score",profile="p",status="Success"} 9
scheduler_framework_extension_point_duration_seconds_count{extension_point="Score",profile="p",status="Success"} 7500
`

func TestPluginMeans(t *testing.T) {
	score := pluginMeans(metricsFixture, "Score")
	for pl, want := range map[string]pluginMean{
		"NUMAAware":        {0.0031, 1000},
		"DeviceAware":      {0.00015, 100}, // every status counts
		"BandwidthAware":   {0.0008, 1000},
		"NodeResourcesFit": {0.002, 1000},
	} {
		got := score[pl]
		if math.Abs(got.sum-want.sum) > 1e-12 || got.count != want.count {
			t.Errorf("Score %s = %+v, want %+v", pl, got, want)
		}
	}
	if len(score) != 4 {
		t.Errorf("Score means of %d plugins, want 4: %v", len(score), score)
	}
	got := formatPluginMeans(metricsFixture)
	want := "score per cycle (every plugin and node) 1.2ms (n=7500); score mean per call: NUMAAware 3.1µs (n=1000) DeviceAware 1.5µs (n=100) BandwidthAware 800ns (n=1000); " +
		"filter mean per call: NUMAAware 250ns (n=2000) DeviceAware - BandwidthAware 270ns (n=3)"
	if got != want {
		t.Errorf("formatPluginMeans =\n  %s\nwant\n  %s", got, want)
	}
	for _, tc := range []struct {
		sum, count float64
		want       string
	}{{0.0031416, 1, "3.14ms"}, {0.000031416, 1, "31.4µs"}, {81e-9, 1, "81ns"}, {2.5, 1, "2.5s"}, {1, 0, "-"}} {
		if got := fmtMean(tc.sum, tc.count); got != tc.want {
			t.Errorf("fmtMean(%g, %g) = %s, want %s", tc.sum, tc.count, got, tc.want)
		}
	}
}

// Two shapes: their throughput ratio per scheduler, the goal judged for sextant; the
// plugins' means and the sampling note are printed.
func TestPrintResultsShapes(t *testing.T) {
	run := func(sched, shape string, podsPerSec float64) result {
		return result{scheduler: sched, shape: shape, size: 5000, pods: 10, bound: 10, podsPerSec: podsPerSec, measured: true}
	}
	s2, s8 := run(schedSextant, "2numa", 200), run(schedSextant, "8numa-8gpu", 190)
	s8.pluginMeans = "score mean per call: NUMAAware 3.1µs (n=1000)"
	var out strings.Builder
	printResults(&out, []result{s2, run(schedVanilla, "2numa", 250), s8, run(schedVanilla, "8numa-8gpu", 100)})
	for _, w := range []string{
		"sextant  2numa",
		"5000 nodes, sextant: throughput 8numa-8gpu/2numa 0.950; goal >= 0.9: PASS",
		"5000 nodes, vanilla: throughput 8numa-8gpu/2numa 0.400\n",
		"5000 nodes 8numa-8gpu: throughput ratio sextant/vanilla 1.900",
		"sextant 5000 nodes 8numa-8gpu: sextant plugins, sampled: score mean per call: NUMAAware 3.1µs (n=1000)",
		"pluginMetricsSamplePercent",
		"shape 8numa-8gpu: 8 NUMA nodes",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}

// A shape with a peak-memory goal: the ratio of peak memory to the first shape's is
// printed and judged for sextant.
func TestPrintResultsPeakMemoryGoal(t *testing.T) {
	run := func(shape string, rss, live int64) result {
		return result{scheduler: schedSextant, shape: shape, size: 5000, pods: 10, bound: 10, podsPerSec: 100, peakRSS: rss, liveHeap: live, measured: true}
	}
	var out strings.Builder
	printResults(&out, []result{run("2numa", 1000<<20, 100<<20), run("2numa-2net", 1000<<20, 110<<20)})
	want := "5000 nodes, sextant: throughput 2numa-2net/2numa 1.000; goal >= 0.9: PASS; peak memory 2numa-2net/2numa 1.000; live heap 2numa-2net/2numa 1.100; goal <= 1.05: MISS"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
}

// 2numa-2net publishes both networks on their own interfaces, names storage on every
// fourth pod that asks for bandwidth, and counts each network's remaining apart.
func TestTwoNetworks(t *testing.T) {
	sh := shapes["2numa-2net"]
	st := bandwidthStatus([][2]int64{{1_000_000_000, 0}, {0, 2_000_000_000}}, sh.networks, time.Now())
	if len(st.Networks) != 2 || st.Networks[0].Name != "pod" || st.Networks[1].Name != "storage" {
		t.Fatalf("networks %+v, want pod and storage", st.Networks)
	}
	if got := st.Networks[1].Interfaces; len(got) != 1 || got[0] != "eth1" {
		t.Fatalf("storage interfaces %v, want [eth1]", got)
	}
	if got := st.Networks[1].Egress.Remaining.Value(); got != 2_000_000_000 {
		t.Fatalf("storage egress remaining %d bits/s, want %d", got, 2_000_000_000)
	}
	if got := st.Total.Ingress.Capacity.Value(); got != 2*linkCapacity {
		t.Fatalf("total ingress capacity %d bits/s, want %d", got, 2*linkCapacity)
	}
	if one := bandwidthStatus([][2]int64{{1, 1}}, shapes[defaultShape].networks, time.Now()); len(one.Networks) != 1 || one.Networks[0].Name != "pod" {
		t.Fatalf("2numa networks %+v, want pod only", one.Networks)
	}

	pods := makeWorkload(1, 1000, sh.gpuPodMax)
	assignNetworks(pods, sh)
	asking, storage := 0, 0
	for i, p := range pods {
		b := &bench{shape: sh, workload: pods}
		ann := b.pod(i, schedSextant).Annotations[annNetwork]
		if p.required == [2]int64{} && p.expected == [2]int64{} {
			if p.network != 0 || ann != "" {
				t.Fatalf("pod %d asks no bandwidth but names network %q", i, ann)
			}
			continue
		}
		asking++
		if p.network == 1 {
			storage++
			if ann != "storage" {
				t.Fatalf("pod %d: annotation %q, want storage", i, ann)
			}
		} else if ann != "" {
			t.Fatalf("pod %d on the pod network has annotation %q", i, ann)
		}
	}
	if storage != asking/4 {
		t.Fatalf("%d of %d pods asking bandwidth name storage, want %d", storage, asking, asking/4)
	}

	b := &bench{
		shape:     sh,
		remaining: map[string][][2]int64{"n1": {{1_000_000_000, 0}, {1_000_000_000, 0}}},
		workload: []podSpec{
			{milliCPU: 100, required: [2]int64{600_000_000, 0}},
			{milliCPU: 100, required: [2]int64{600_000_000, 0}, network: 1}, // storage's own 1G: fine
			{milliCPU: 100, required: [2]int64{600_000_000, 0}, network: 1}, // 1.2G on storage: a violation
		},
	}
	var res result
	b.analyse(&res, []binding{{seq: 0, pod: 0, node: "n1"}, {seq: 1, pod: 1, node: "n1"}, {seq: 2, pod: 2, node: "n1"}}, false)
	if res.bwAsked != 3 || res.bwViolation != 1 {
		t.Fatalf("asked %d, violations %d; want 3, 1", res.bwAsked, res.bwViolation)
	}
}

// The pod mix's shares cover every draw, and each class asks for CPU and memory.
func TestPodClasses(t *testing.T) {
	var sum float64
	for _, c := range podClasses(4) {
		sum += c.share
		if c.milliCPU.unit == 0 || c.memory.unit == 0 {
			t.Errorf("class %s asks for no CPU or memory", c.kind)
		}
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("shares sum to %g, want 1", sum)
	}
	if g := podClasses(4)[0]; g.kind != "gpu" || g.gpus != (span{1, 4, 1}) {
		t.Errorf("first class %+v, want gpu pods asking 1-4 GPUs", g)
	}
}

// TestLaunchRetriesATakenPort: a scheduler that exits because another process took its
// port first is started again on another port, up to portAttempts times; one that exits
// for any other reason is not.
func TestLaunchRetriesATakenPort(t *testing.T) {
	for _, tc := range []struct {
		name, says string
		starts     int
	}{
		// kube-scheduler's own words, from a run against a port held by a listener.
		{"port taken", `E1128 09:18:31.308271   29958 run.go:72] "command failed" err="failed to create listener: failed to listen on 127.0.0.1:41293: listen tcp 127.0.0.1:41293: bind: address already in use"`, portAttempts},
		{"other failure", `E1128 09:18:27.744573   29887 run.go:72] "command failed" err="stat /nonexistent: no such file or directory"`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			starts := filepath.Join(dir, "starts")
			bin := filepath.Join(dir, "scheduler")
			script := fmt.Sprintf("#!/bin/sh\necho started >>%q\necho %q >&2\nexit 1\n", starts, tc.says)
			if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			b := &bench{o: options{workDir: dir, kubeconfig: filepath.Join(dir, "kubeconfig")}, size: 1, shape: shapes[defaultShape]}
			p, err := b.launch(context.Background(), "sextant", bin, false, nil)
			if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
				t.Errorf("launch: %v, want the scheduler to have exited before it was ready", err)
			}
			if p != nil {
				p.stop()
			}
			got, err := os.ReadFile(starts)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(got), "started"); n != tc.starts {
				t.Errorf("started %d times, want %d", n, tc.starts)
			}
		})
	}
}

// The DRA shape: GPUs as the agent's DRA driver publishes them (a slice per node, the
// standard NUMA attribute where the NodeTopology puts each GPU, kept from the device
// plugin there), no sextant.io/gpu allocatable, and GPU pods asking through a claim.
func TestDRAShape(t *testing.T) {
	sh := shapes["8numa-dra"]
	if _, ok := benchNode("n", "r", sh).Status.Allocatable[resourceGPU]; ok {
		t.Error("a DRA node advertises sextant.io/gpu")
	}
	if _, ok := benchNode("n", "r", shapes["8numa-8gpu"]).Status.Allocatable[resourceGPU]; !ok {
		t.Error("8numa-8gpu's node does not advertise sextant.io/gpu")
	}
	topo := topologyStatus(time.Now(), sh)
	slice := resourceSlice("n", "r", sh)
	if len(slice.Spec.Devices) != len(sh.gpuAddrs) || slice.Spec.Driver != draDriver || *slice.Spec.NodeName != "n" {
		t.Fatalf("slice %+v, want the node's %d GPUs of driver %s", slice.Spec, len(sh.gpuAddrs), draDriver)
	}
	for i, d := range slice.Spec.Devices {
		dev := topo.PCIDevices[i]
		if d.Name != draDeviceName(dev.Address) || *d.Attributes["resource.kubernetes.io/numaNode"].IntValue != int64(*dev.NUMANode) || dev.Excluded != draExcluded {
			t.Errorf("device %d: %s on NUMA node %d, topology %s on %d excluded %q", i, d.Name, *d.Attributes["resource.kubernetes.io/numaNode"].IntValue, dev.Address, *dev.NUMANode, dev.Excluded)
		}
	}
	pods := makeWorkload(1, 200, sh.gpuPodMax)
	b := &bench{shape: sh, workload: pods}
	gpuPods := 0
	for i, p := range pods {
		pod := b.pod(i, schedSextant)
		c := pod.Spec.Containers[0]
		_, limit := c.Resources.Limits[resourceGPU]
		if p.gpus == 0 {
			if len(pod.Spec.ResourceClaims) != 0 || limit {
				t.Fatalf("pod %d asks for no GPU but has claims %v or a GPU limit", i, pod.Spec.ResourceClaims)
			}
			continue
		}
		gpuPods++
		if limit || len(pod.Spec.ResourceClaims) != 1 || *pod.Spec.ResourceClaims[0].ResourceClaimName != claimName(schedSextant, i) || len(c.Resources.Claims) != 1 {
			t.Fatalf("GPU pod %d: limits %v, claims %v; want its claim only", i, c.Resources.Limits, pod.Spec.ResourceClaims)
		}
	}
	if gpuPods == 0 {
		t.Fatal("the workload has no GPU pod")
	}
}

func TestUndecidedPlacements(t *testing.T) {
	text := `# TYPE sextant_ranker_numa_undecided_placements_total counter
sextant_ranker_numa_undecided_placements_total{reason="no_pinning"} 4
sextant_ranker_numa_undecided_placements_total{reason="silent_agent"} 17
sextant_ranker_numa_filter_rejections_total{reason="silent_agent"} 3
`
	if got := undecidedPlacements(text, "silent_agent"); got != 17 {
		t.Errorf("silent_agent: %v, want 17", got)
	}
	if got := undecidedPlacements(metricsFixture, "silent_agent"); got != 0 {
		t.Errorf("a scrape without the metric: %v, want 0", got)
	}
}
