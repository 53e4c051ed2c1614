package main

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
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
		if got := numaNeeded(podSpec{milliCPU: tc.cpu, memory: tc.mem}); got != tc.want {
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
		remaining: map[string][2]int64{"n1": {1_000_000_000, 0}},
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
	a, b := makeWorkload(7, 1000), makeWorkload(7, 1000)
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

// The bench runs sextant-ranker with the soft memory limit it would set in the chart's
// container; the default must follow the chart.
func TestChartRankerMemoryLimit(t *testing.T) {
	raw, err := os.ReadFile("../../charts/sextant/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Ranker struct {
			Resources struct {
				Limits map[string]string `json:"limits"`
			} `json:"resources"`
		} `json:"ranker"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	if got := values.Ranker.Resources.Limits["memory"]; got != chartRankerMemoryLimit {
		t.Errorf("chart's ranker.resources.limits.memory = %q, bench default --ranker-memory-limit = %q", got, chartRankerMemoryLimit)
	}
}

// The goal is judged on the median of the rounds' ratios, violations on their sum; one
// round prints as before.
func TestPrintResultsRounds(t *testing.T) {
	run := func(sched string, round int, podsPerSec float64, violations int) result {
		return result{scheduler: sched, size: 5000, round: round, pods: 10, bound: 10, podsPerSec: podsPerSec,
			cpuPerPod: time.Duration(float64(time.Second) / podsPerSec), bwViolation: violations, measured: true}
	}
	for _, tc := range []struct {
		name    string
		results []result
		want    []string
	}{
		{"one round", []result{run(schedSextant, 0, 270, 0), run(schedVanilla, 0, 300, 7)},
			[]string{"throughput ratio sextant/vanilla 0.900;", "violations 0, NUMA spread 0 (vanilla 7, 0)", "goal ratio >= 0.9: PASS; goal zero sextant violations: PASS", "\nsextant "}},
		{"median of three rounds passes", []result{
			run(schedSextant, 0, 200, 0), run(schedVanilla, 0, 300, 1),
			run(schedVanilla, 1, 300, 1), run(schedSextant, 1, 285, 0),
			run(schedSextant, 2, 279, 0), run(schedVanilla, 2, 300, 1)},
			[]string{"sextant/vanilla median 0.930 (rounds 0.667 0.950 0.930)", "(vanilla 3, 0)", "goal ratio >= 0.9: PASS", "sextant#2 ", "vanilla#3 "}},
		{"ranker-default too", []result{run(schedSextant, 0, 270, 0), run(schedVanilla, 0, 300, 7), run(schedRankerDefault, 0, 330, 7)},
			[]string{"throughput ratio ranker-default/vanilla 1.100, CPU per bound pod 0.909"}},
		{"median of two rounds misses", []result{
			run(schedSextant, 0, 200, 0), run(schedVanilla, 0, 300, 0),
			run(schedVanilla, 1, 300, 0), run(schedSextant, 1, 285, 1)},
			[]string{"median 0.808 (rounds 0.667 0.950)", "goal ratio >= 0.9: MISS; goal zero sextant violations: MISS"}},
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

// The ceiling is what every scheduler hit at --scheduler-qps 300: 5000 pods bound in
// 15.7 s (319.2 pods/s) in each of three runs on a quiet machine.
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
