// Command bench-ranker measures sextant-ranker against vanilla kube-scheduler on the
// real API server of the local cluster, in the manner of kube-scheduler's
// scheduler_perf: for each cluster size it creates Node objects (no kubelets) with a
// NodeBandwidth and a NodeTopology each, then schedules the same seeded mix of pending
// pods once with each scheduler (--rounds N: N times each, the order reversed every
// other round, the goal judged on the median ratio), and prints throughput and
// placement quality:
//
//   - pods/s: bound pods over the time from the scheduler being ready (or its first
//     binding, whichever came first) to the last binding. The pods are all created,
//     pending, before the scheduler starts, so that the harness's own creation rate and
//     the API server's admission cost are not what is measured.
//   - bandwidth violations: per node, walking its pods in binding order and subtracting
//     each pod's required bandwidth from the node's reported remaining per direction, the
//     pods that take a direction below zero.
//   - NUMA spread: pods placed over more NUMA nodes than they need on an empty node. For
//     sextant-ranker from the numa.sextant.io/nodes annotation it writes; for vanilla,
//     which chooses none, from a simulation of the kubelet's best effort (per node, in
//     binding order, best-fit each pod into the fewest NUMA nodes with room).
//
// Both schedulers run as separate processes with the admin kubeconfig, leader election
// off, and the same clientConnection qps/burst (--scheduler-qps, default 1000).
// A limit the schedulers reach measures the limit, not the scheduler, and a limit far
// above the API server's pace on two shared cores floods it into timeouts; 1000 lies
// between (design 0018 has the runs behind that). A run that comes within 3% of the
// ceiling is flagged AT-QPS-LIMIT. The harness also reads
// each scheduler's /metrics after its run and prints where the time went (attempts,
// extension points, costliest plugins).
//
// --shape picks what the bench nodes look like (nodeShape, the shapes map): 2numa, the
// default and the only shape before there were shapes; 8numa-8gpu, 8 NUMA nodes of the
// same size in 2 sockets with a GPU on each; or 2numa-2net, 2numa with a storage network
// beside the pod network in every NodeBandwidth, named by a quarter of the pods that ask
// for bandwidth. A list of shapes runs each at every size, setting up its own Node
// objects, and prints each shape's throughput and peak memory over the first's per
// scheduler. Every sextant run prints the Score and Filter extension points' mean per
// cycle and its plugins' mean time per call (sum/count of
// scheduler_plugin_execution_duration_seconds); kube-scheduler times plugins in a
// sample of about one scheduling cycle in ten only.
//
// The harness is data where it can be, as scheduler_perf's workloads are: the node
// shapes (shapes.go) and the pod mix (podClasses in workload.go) are tables. The rest is
// split by step: cluster.go sets up and removes the Nodes and heartbeats, runonce.go
// runs one scheduler over the workload, scheduler.go starts and watches a scheduler
// process, analyse.go judges the placements, metrics.go reads /metrics, report.go
// prints the results and goals.
//
// The bench nodes have no kubelet: the node lifecycle controller marks them Unknown and
// taints them unreachable as their (only) heartbeat ages, so the pods tolerate every
// taint. Heartbeat objects are written once and their sampleTime refreshed before each
// run; BandwidthAware gets staleAfter 1h so a long run cannot age them out half-way.
//
// scripts/bench-ranker.sh builds this and sextant-ranker and runs it; `make bench-ranker`
// calls that script.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	sextantv1 "sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/internal/kubeclient"
)

// The annotations and resource names of DESIGN.md. They are spelled out here rather than
// imported from the ranker's plugin packages so that the benchmark builds (and can run
// vanilla) while those packages are being written.
const (
	annIngressRequired = "bandwidth.sextant.io/ingress-required"
	annEgressRequired  = "bandwidth.sextant.io/egress-required"
	annIngressExpected = "bandwidth.sextant.io/ingress-expected"
	annEgressExpected  = "bandwidth.sextant.io/egress-expected"
	annStrategy        = "bandwidth.sextant.io/strategy"
	annNetwork         = "bandwidth.sextant.io/network"
	annNUMANodes       = "numa.sextant.io/nodes"

	resourceGPU = corev1.ResourceName("sextant.io/gpu")

	labelBench     = "sextant.io/bench"
	labelScheduler = "sextant.io/bench-scheduler"
	labelAgent     = "sextant.io/agent"

	image = "sextant.local/busybox:dev"
)

// What every bench node has whatever its shape (nodeShape).
const (
	linkCapacity = 10_000_000_000 // bits/s per direction
	podsPerNode  = 110
	schedVanilla = "vanilla"
	schedSextant = "sextant"
	// schedRankerDefault is the sextant-ranker binary serving kube-scheduler's default
	// profile: beside vanilla it separates what the sextant plugins cost from what
	// building kube-scheduler into this module costs.
	schedRankerDefault = "ranker-default"
	sextantPlugin      = "BandwidthAware"
)

type schemaGVR = schema.GroupVersionResource

var (
	nbwGVR   = sextantv1.GroupVersion.WithResource("nodebandwidths")
	ntopoGVR = sextantv1.GroupVersion.WithResource("nodetopologies")
)

type options struct {
	kubeconfig    string
	sizes         []int
	shapes        []nodeShape
	pods          int
	seed          int64
	schedulers    []string
	kubeScheduler string
	sextantRanker string
	workDir       string
	timeout       time.Duration
	settle        time.Duration
	workers       int
	qps           float64
	schedulerQPS  int
	cleanupRun    string
	cpuProfile    time.Duration
	// rounds is how many times each scheduler runs per size; rounds after the first
	// run the schedulers in reverse order, alternating (see runSize).
	rounds int
	// rankerEnv is added to sextant-ranker's environment: the chart's GC settings, then
	// --ranker-env.
	rankerEnv []string
}

func main() {
	var o options
	var sizes, scheds, shapeList string
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig of the cluster (both schedulers use it too)")
	flag.StringVar(&sizes, "nodes", "500,5000", "comma-separated cluster sizes (Node objects) to run")
	flag.StringVar(&shapeList, "shape", defaultShape, shapesHelp())
	flag.IntVar(&o.pods, "pods", 5000, "pending pods per run")
	flag.Int64Var(&o.seed, "seed", 1, "seed of the node bandwidth and the pod mix")
	// sextant first: the second run of a size shares the API server with the first
	// one's 5000 pod deletions and their aftermath, which slowed sextant-ranker (bound by
	// CPU) and not vanilla (docs/design/0018-how-bench-ranker-measures.md).
	flag.StringVar(&scheds, "schedulers", "sextant,vanilla", "which schedulers to run, in order: vanilla, sextant, "+schedRankerDefault+" (sextant-ranker without the sextant plugins; default sextant first: see the comment in main)")
	flag.StringVar(&o.kubeScheduler, "kube-scheduler", "", "the cluster's kube-scheduler binary (default: kube-bin/kube-scheduler beside the kubeconfig's directory)")
	flag.StringVar(&o.sextantRanker, "sextant-ranker", "bin/sextant-ranker", "the sextant-ranker binary built from this tree")
	flag.StringVar(&o.workDir, "work-dir", "", "where scheduler configs and logs go (default: a new temporary directory)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up on a run after this long")
	flag.DurationVar(&o.settle, "settle", 15*time.Second, "a run ends when every unbound pod is unschedulable and nothing was bound for this long")
	flag.IntVar(&o.workers, "workers", 32, "parallel API requests while setting up and tearing down")
	flag.Float64Var(&o.qps, "qps", 2000, "client QPS (and burst) of the harness")
	flag.StringVar(&o.cleanupRun, "cleanup-run", "", "only remove what an earlier, killed run left behind: the value of its sextant.io/bench label (e.g. r1a2b3c-5000, or r1a2b3c-8numa-8gpu-5000 for a shape other than "+defaultShape+")")
	flag.IntVar(&o.schedulerQPS, "scheduler-qps", 1000, "clientConnection qps and burst of both schedulers: high enough that neither waits on its rate limiter (a run within 3% of the limiter's ceiling is marked AT-QPS-LIMIT; scheduler_perf uses 5000, which floods a small shared API server)")
	flag.IntVar(&o.rounds, "rounds", 1, "run each scheduler this many times per size, the order reversed every other round; the goal is judged on the median of the rounds' sextant/vanilla ratios (the 2-core machine moves single runs by ±15-30%)")
	flag.DurationVar(&o.cpuProfile, "cpu-profile", 0, "if set, fetch a CPU profile of this length from each scheduler's /debug/pprof once it is scheduling, into cpu-<scheduler>-<nodes>.pprof in the work dir, and a heap profile after the run into heap-<scheduler>-<nodes>.pprof (-<shape> added before <nodes> to these, the metrics and the logs for a shape other than "+defaultShape+", -r<round> after it from round 2 on)")
	chartDir := flag.String("chart", "charts/sextant", "the chart whose ranker Deployment's Go GC environment (GOGC, GOMEMLIMIT, from ranker.gc) sextant-ranker runs with, as deployed by the chart's default values (the bench's processes run in no memory-limited cgroup)")
	rankerEnv := flag.String("ranker-env", "", "comma-separated NAME=VALUE added to sextant-ranker's environment after the chart's, e.g. GOGC=200 to measure another GC percent")
	flag.Parse()

	var err error
	if o.rankerEnv, err = chartRankerGCEnv(*chartDir); err != nil {
		fatal(fmt.Errorf("--chart %s: %w", *chartDir, err))
	}
	extra, err := parseEnv(*rankerEnv)
	if err != nil {
		fatal(err)
	}
	o.rankerEnv = append(o.rankerEnv, extra...)
	if o.sizes, err = parseSizes(sizes); err != nil {
		fatal(err)
	}
	if o.shapes, err = parseShapes(shapeList); err != nil {
		fatal(err)
	}
	switch {
	case o.rounds < 1:
		fatal(fmt.Errorf("--rounds %d: want 1 or more", o.rounds))
	case o.pods < 1:
		fatal(fmt.Errorf("--pods %d: want 1 or more", o.pods))
	case o.workers < 1:
		fatal(fmt.Errorf("--workers %d: want 1 or more", o.workers))
	case !(o.qps > 0):
		fatal(fmt.Errorf("--qps %v: want a positive rate such as 2000", o.qps))
	case o.schedulerQPS < 1:
		fatal(fmt.Errorf("--scheduler-qps %d: want 1 or more, such as 1000", o.schedulerQPS))
	case o.timeout <= 0 || o.settle <= 0:
		fatal(fmt.Errorf("--timeout %s / --settle %s: want positive durations", o.timeout, o.settle))
	case o.cpuProfile < 0:
		fatal(fmt.Errorf("--cpu-profile %s: want a positive duration such as 10s, or none", o.cpuProfile))
	}
	for _, s := range strings.Split(scheds, ",") {
		s = strings.TrimSpace(s)
		if s != schedVanilla && s != schedSextant && s != schedRankerDefault {
			fatal(fmt.Errorf("--schedulers: unknown scheduler %q; want vanilla, sextant and/or %s", s, schedRankerDefault))
		}
		o.schedulers = append(o.schedulers, s)
	}
	if o.kubeconfig == "" {
		fatal(errors.New("--kubeconfig (or KUBECONFIG) is required"))
	}
	if o.kubeScheduler == "" {
		// scripts/cluster.sh links kube-bin beside pki/ in its state directory.
		o.kubeScheduler = filepath.Join(filepath.Dir(filepath.Dir(o.kubeconfig)), "kube-bin", "kube-scheduler")
	}
	if o.workDir == "" {
		if o.workDir, err = os.MkdirTemp("", "sextant-bench-ranker-"); err != nil {
			fatal(fmt.Errorf("make work directory: %w", err))
		}
	} else if err := os.MkdirAll(o.workDir, 0o755); err != nil {
		fatal(fmt.Errorf("make work directory: %w", err))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench-ranker:", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--nodes: %q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, o options) error {
	cfg, err := kubeclient.Config(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(o.qps), int(o.qps)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("make client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("make dynamic client: %w", err)
	}
	if o.cleanupRun != "" {
		b := &bench{o: o, kube: kube, dyn: dyn, shape: shapes[defaultShape], runID: o.cleanupRun, ns: "sextant-bench-" + o.cleanupRun}
		return b.cleanup(ctx)
	}
	runID := fmt.Sprintf("r%06x", rand.New(rand.NewSource(time.Now().UnixNano())).Intn(1<<24))
	var shapeNames []string
	for _, sh := range o.shapes {
		shapeNames = append(shapeNames, sh.name)
	}
	logf("run %s: shapes %v, sizes %v, %d pods, schedulers %v, seed %d; logs in %s", runID, shapeNames, o.sizes, o.pods, o.schedulers, o.seed, o.workDir)
	if stale, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labelBench}); err == nil && len(stale.Items) > 0 {
		logf("WARNING: %d Node objects of other bench runs exist (label %s, e.g. %s=%s); they are left alone (--cleanup-run removes them)",
			len(stale.Items), labelBench, labelBench, stale.Items[0].Labels[labelBench])
	}

	var results []result
	run := func(shape nodeShape, size int, rounds []int) error {
		b := &bench{o: o, cfg: cfg, kube: kube, dyn: dyn, size: size, shape: shape, rounds: rounds}
		b.runID = runID + "-" + b.tag()
		if len(rounds) == 1 && rounds[0] > 0 {
			// Its own objects: the last round's namespace of this shape may still be
			// terminating.
			b.runID += fmt.Sprintf("-r%d", rounds[0]+1)
		}
		res, err := b.runSize(ctx)
		results = append(results, res...)
		if err != nil {
			printResults(os.Stdout, results)
			return fmt.Errorf("%s, %d nodes: %w", shape.name, size, err)
		}
		return nil
	}
	if len(o.shapes) > 1 && o.rounds > 1 {
		// Shapes are compared round by round: each round sets every shape up in turn
		// (in reverse every other round), so that the runs a ratio compares are close
		// in time, not minutes apart, on a machine whose speed drifts.
		for round := range o.rounds {
			order := slices.Clone(o.shapes)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, shape := range order {
				for _, size := range o.sizes {
					if err := run(shape, size, []int{round}); err != nil {
						return err
					}
				}
			}
		}
		printResults(os.Stdout, results)
		return nil
	}
	all := make([]int, o.rounds)
	for i := range all {
		all[i] = i
	}
	for _, shape := range o.shapes {
		for _, size := range o.sizes {
			if err := run(shape, size, all); err != nil {
				return err
			}
		}
	}
	printResults(os.Stdout, results)
	return nil
}
