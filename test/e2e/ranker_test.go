//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	sextantv1 "sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/profile"
)

func rankerBinary(t *testing.T) string { return goBinary(t, "./ranker/cmd/sextant-ranker") }

type rankerOptions struct {
	// scheduler is the profile's schedulerName: each test's own, so the chart's ranker
	// (profile "sextant") and other tests' rankers leave its pods alone.
	scheduler     string
	port          int
	leaseName     string // empty: no leader election
	strategy      string
	ingressWeight int
	egressWeight  int
	staleAfter    time.Duration
	// minWindow: the agents' --window (default the plugin's 60s).
	minWindow time.Duration
}

// startRanker runs sextant-ranker as a process with the chart's RBAC and a profile
// "sextant" configured as the chart configures it.
func startRanker(t *testing.T, o rankerOptions) *process {
	t.Helper()
	kubeconfig := serviceAccountKubeconfig(t, releaseNamespace, "sextant-ranker")
	if o.strategy == "" {
		o.strategy = "best-fit"
	}
	if o.ingressWeight == 0 && o.egressWeight == 0 {
		o.ingressWeight, o.egressWeight = 1, 1
	}
	if o.staleAfter == 0 {
		o.staleAfter = time.Minute
	}
	leader := "leaderElect: false"
	if o.leaseName != "" {
		leader = fmt.Sprintf(`leaderElect: true
  resourceName: %s
  resourceNamespace: %s
  leaseDuration: 6s
  renewDeadline: 4s
  retryPeriod: 1s`, o.leaseName, releaseNamespace)
	}
	config := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
leaderElection:
  %s
profiles:
- schedulerName: %s
%s  pluginConfig:
  - name: BandwidthAware
    args:
      strategy: %s
      ingressWeight: %d
      egressWeight: %d
      staleAfter: %s
`, kubeconfig, leader, o.scheduler, profile.Plugins, o.strategy, o.ingressWeight, o.egressWeight, o.staleAfter)
	if o.minWindow > 0 {
		config += fmt.Sprintf("      minWindow: %s\n", o.minWindow)
	}
	path := filepath.Join(t.TempDir(), "ranker.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return startProcess(t, rankerBinary(t), "--config", path, fmt.Sprintf("--secure-port=%d", o.port),
		"--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig, "--v=2")
}

// rankerNode is a Node object with allocatable resources and a NodeBandwidth, standing
// for a machine whose agent reported these values.
type rankerNode struct {
	name                     string
	ingressRemaining, egress string // quantities; "" = capacity unknown
	sampled                  time.Time
	// networks, when set, are published as status.networks: name -> ingress and
	// egress remaining. The total then stays the interfaces' sum, for people only.
	networks map[string][2]string
}

func makeRankerNodes(t *testing.T, prefix string, nodes []rankerNode) map[string]string {
	t.Helper()
	names := map[string]string{} // logical name → real node name
	for _, n := range nodes {
		node := readyFakeNode(t, prefix+n.name+"-", map[string]string{"sextant.io/e2e": prefix}, corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("64Gi"),
			corev1.ResourcePods: resource.MustParse("110"),
		})
		publishBandwidth(t, node, n)
		names[n.name] = node.Name
	}
	return names
}

func publishBandwidth(t *testing.T, node *corev1.Node, n rankerNode) {
	t.Helper()
	sampled := n.sampled
	if sampled.IsZero() {
		sampled = time.Now()
	}
	st := metav1.NewTime(sampled.UTC().Truncate(time.Second))
	dir := func(rem string) sextantv1.DirectionBandwidth {
		if rem == "" {
			return sextantv1.DirectionBandwidth{Rate: qty("0"), Peak: qty("0")}
		}
		return sextantv1.DirectionBandwidth{Capacity: qty("10G"), Rate: qty("0"), Peak: qty("0"), Remaining: qty(rem)}
	}
	bw := sextantv1.Bandwidth{Ingress: dir(n.ingressRemaining), Egress: dir(n.egress)}
	nbw := &sextantv1.NodeBandwidth{
		TypeMeta: metav1.TypeMeta{APIVersion: sextantv1.GroupVersion.String(), Kind: "NodeBandwidth"},
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
		}}},
	}
	client := local.dynamic.Resource(nodeBandwidthGVR)
	ctx := context.Background()
	created, err := client.Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		if created, err = client.Create(ctx, toUnstructured(t, nbw), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create NodeBandwidth: %v", err)
		}
	}
	status := sextantv1.NodeBandwidthStatus{
		SampleTime: &st, Window: &metav1.Duration{Duration: time.Minute}, AgentVersion: "e2e",
		Interfaces: []sextantv1.InterfaceBandwidth{{Name: "eth0", Bandwidth: bw}},
		Total:      &bw,
	}
	names := slices.Sorted(maps.Keys(n.networks))
	for i, name := range names {
		rem := n.networks[name]
		nbw := sextantv1.Bandwidth{Ingress: dir(rem[0]), Egress: dir(rem[1])}
		iface := fmt.Sprintf("eth%d", i+1)
		status.Interfaces = append(status.Interfaces, sextantv1.InterfaceBandwidth{Name: iface, Bandwidth: nbw})
		status.Networks = append(status.Networks, sextantv1.NetworkBandwidth{Name: name, Interfaces: []string{iface}, Bandwidth: nbw})
	}
	if len(names) > 0 {
		// A total roomier than any network: only a ranker that read it would place on it.
		status.Total = &sextantv1.Bandwidth{Ingress: dir("9G"), Egress: dir("9G")}
	}
	created.Object["status"] = toUnstructured(t, &sextantv1.NodeBandwidth{Status: status}).Object["status"]
	if _, err := client.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("NodeBandwidth status: %v", err)
	}
}

// bandwidthPod is a pod for the test's ranker (schedulerName = prefix), restricted to
// the test's nodes.
func bandwidthPod(ns, name, prefix string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: corev1.PodSpec{
			SchedulerName: prefix,
			NodeSelector:  map[string]string{"sextant.io/e2e": prefix},
			// The test's nodes have no kubelet (readyFakeNode keeps their leases); should
			// a lease lapse on a loaded machine, the taints must not change the outcome.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "app", Image: "sextant.local/busybox:dev", ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
				}},
			}},
		},
	}
}

func waitScheduled(t *testing.T, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := local.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not scheduled: %v; events: %s", ns, name, err, podEvents(ns, name))
	}
	return pod
}

// waitFailedScheduling waits for the pod's first FailedScheduling event and returns its
// message.
func waitFailedScheduling(t *testing.T, ns, name string, timeout time.Duration) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		evs, err := local.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=FailedScheduling"})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		msg = evs.Items[0].Message
		return true, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event for pod %s/%s: %v; events: %s", ns, name, err, podEvents(ns, name))
	}
	return msg
}

func podEvents(ns, name string) string {
	evs, err := local.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var msgs []string
	for _, e := range evs.Items {
		msgs = append(msgs, e.Reason+": "+e.Message)
	}
	return strings.Join(msgs, " | ")
}

// TestRankerFourNodeExample is the four-node worked example on the real API server: required
// 400M, expected 500M; remaining 900M, 500M, 700M, 300M.
func TestRankerFourNodeExample(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ns := testNamespace(t)
	prefix := "four" + strings.TrimPrefix(ns, "e2e-")
	nodes := makeRankerNodes(t, prefix, []rankerNode{
		{name: "node-1", ingressRemaining: "900M"}, {name: "node-2", ingressRemaining: "500M"},
		{name: "node-3", ingressRemaining: "700M"}, {name: "node-4", ingressRemaining: "300M"},
	})
	startRanker(t, rankerOptions{scheduler: prefix, port: 10361})
	ctx := context.Background()
	for _, c := range []struct{ strategy, want string }{{"best-fit", "node-2"}, {"most-headroom", "node-1"}} {
		name := "four-" + c.strategy
		_, err := local.kube.CoreV1().Pods(ns).Create(ctx, bandwidthPod(ns, name, prefix, map[string]string{
			"bandwidth.sextant.io/ingress-required": "400M",
			"bandwidth.sextant.io/ingress-expected": "500M",
			"bandwidth.sextant.io/strategy":         c.strategy,
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod := waitScheduled(t, ns, name, time.Minute)
		if pod.Spec.NodeName != nodes[c.want] {
			t.Errorf("%s: pod on %s, want %s (%s)", c.strategy, pod.Spec.NodeName, c.want, nodes[c.want])
		}
		// Remove it so its reservation does not weigh on the next pod.
		_ = local.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
}

// TestRankerPlacesByNetwork: a pod is placed on the remaining bandwidth of the network it
// names, never on the sum over a node's NICs. node-x's pod network is roomy and it has
// no storage network; node-y's pod network is nearly full and its storage network
// roomy. Each node's total says 9G, which would pass every pod below.
func TestRankerPlacesByNetwork(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ns := testNamespace(t)
	prefix := "net" + strings.TrimPrefix(ns, "e2e-")
	nodes := makeRankerNodes(t, prefix, []rankerNode{
		{name: "node-x", ingressRemaining: "2G", egress: "2G", networks: map[string][2]string{"pod": {"2G", "2G"}}},
		{name: "node-y", ingressRemaining: "2G", egress: "2G", networks: map[string][2]string{"pod": {"100M", "100M"}, "storage": {"6G", "6G"}}},
	})
	startRanker(t, rankerOptions{scheduler: prefix, port: 10380})
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		annotations map[string]string
		want        string
	}{
		{"pod-network", map[string]string{"bandwidth.sextant.io/ingress-required": "500M"}, "node-x"},
		{"storage", map[string]string{"bandwidth.sextant.io/ingress-required": "3G", "bandwidth.sextant.io/network": "storage"}, "node-y"},
		// Naming the network alone keeps the pod off nodes without it.
		{"storage-no-rate", map[string]string{"bandwidth.sextant.io/network": "storage"}, "node-y"},
	} {
		if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, bandwidthPod(ns, c.name, prefix, c.annotations), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if pod := waitScheduled(t, ns, c.name, time.Minute); pod.Spec.NodeName != nodes[c.want] {
			t.Errorf("%s: on %s, want %s (%s)", c.name, pod.Spec.NodeName, c.want, nodes[c.want])
		}
	}
	// 3G on the pod network fits the pod network of neither node (though both totals
	// say 9G): it stays Pending, and a pod naming a network no node has is told so,
	// whether or not it requires a rate.
	for _, c := range []struct {
		name        string
		annotations map[string]string
		wantMsg     string
	}{
		{"too-big", map[string]string{"bandwidth.sextant.io/ingress-required": "3G"}, "didn't have the pod's required ingress bandwidth"},
		{"no-such-network", map[string]string{"bandwidth.sextant.io/ingress-required": "1M", "bandwidth.sextant.io/network": "backup"}, `no network "backup"`},
		{"no-such-network-no-rate", map[string]string{"bandwidth.sextant.io/ingress-expected": "1M", "bandwidth.sextant.io/network": "backup"}, `no network "backup"`},
	} {
		if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, bandwidthPod(ns, c.name, prefix, c.annotations), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func() (bool, string) {
			p, err := local.kube.CoreV1().Pods(ns).Get(ctx, c.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Spec.NodeName != "" {
				t.Fatalf("%s bound to %s, want Pending", c.name, p.Spec.NodeName)
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && strings.Contains(cond.Message, c.wantMsg) {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%s conditions %+v, want a PodScheduled message containing %s", c.name, p.Status.Conditions, c.wantMsg)
		})
	}
}

// TestRankerWeightsFlipDecision: node A has much ingress and little egress left, node B
// the reverse; the weights decide.
func TestRankerWeightsFlipDecision(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	for i, c := range []struct {
		in, out int
		want    string
	}{{10, 1, "node-a"}, {1, 10, "node-b"}} {
		ns := testNamespace(t)
		prefix := fmt.Sprintf("w%d%s", i, strings.TrimPrefix(ns, "e2e-"))
		nodes := makeRankerNodes(t, prefix, []rankerNode{
			{name: "node-a", ingressRemaining: "9G", egress: "1G"},
			{name: "node-b", ingressRemaining: "1G", egress: "9G"},
		})
		r := startRanker(t, rankerOptions{scheduler: prefix, port: 10362 + i, strategy: "most-headroom", ingressWeight: c.in, egressWeight: c.out})
		_, err := local.kube.CoreV1().Pods(ns).Create(ctx, bandwidthPod(ns, "p", prefix, map[string]string{
			"bandwidth.sextant.io/ingress-required": "100M",
			"bandwidth.sextant.io/egress-required":  "100M",
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod := waitScheduled(t, ns, "p", time.Minute)
		if pod.Spec.NodeName != nodes[c.want] {
			t.Errorf("weights ingress=%d egress=%d: pod on %s, want %s", c.in, c.out, pod.Spec.NodeName, c.want)
		}
		r.stop()
	}
}

// TestRankerStaleReportExcludesNode: the fitting node's report reached the ranker longer
// than staleAfter ago; the other node's agent keeps writing. Staleness is on the
// ranker's clock: the stale node's sampleTime runs an hour ahead, which does not keep
// it fresh, and the fresh node's five minutes behind, which does not age it. The ranker
// starts after both reports exist, so it also dates the reports it lists at startup
// (by the API server's write, not the moment it listed them).
func TestRankerStaleReportExcludesNode(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	ns := testNamespace(t)
	prefix := "stale" + strings.TrimPrefix(ns, "e2e-")
	nodes := makeRankerNodes(t, prefix, []rankerNode{
		{name: "fresh", ingressRemaining: "500M", sampled: time.Now().Add(-5 * time.Minute)},
		{name: "stale", ingressRemaining: "5G", sampled: time.Now().Add(time.Hour)},
	})
	keepReporting(t, []string{nodes["fresh"]}, nil, -5*time.Minute)
	const staleAfter = 10 * time.Second
	startRanker(t, rankerOptions{scheduler: prefix, port: 10365, strategy: "most-headroom", staleAfter: staleAfter})
	// Until then the stale node's report is fresh, and most-headroom would pick it.
	time.Sleep(staleAfter + 2*time.Second)
	_, err := local.kube.CoreV1().Pods(ns).Create(ctx, bandwidthPod(ns, "p", prefix, map[string]string{
		"bandwidth.sextant.io/ingress-required": "100M",
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod := waitScheduled(t, ns, "p", time.Minute); pod.Spec.NodeName != nodes["fresh"] {
		t.Errorf("pod on %s, want the fresh node %s: the stale node must be excluded", pod.Spec.NodeName, nodes["fresh"])
	}
}

// TestRankerQueuesPodOnNewReport: a pod no node has the bandwidth for waits; the
// node's next report, with room for it, gets it placed at once, whenever the report
// comes: right after the failure (while the pod's own status update retries it) or
// once it waits among the unschedulable pods. kube-scheduler does not watch
// NodeBandwidth: the heartbeat store activates the pod after it holds the report
// (docs/design/0060-one-watch-per-heartbeat-kind.md). Without that the pod would wait
// for the unschedulable flush, 5 minutes.
func TestRankerQueuesPodOnNewReport(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	ns := testNamespace(t)
	prefix := "requeue" + strings.TrimPrefix(ns, "e2e-")
	nodes := makeRankerNodes(t, prefix, []rankerNode{{name: "node-1", ingressRemaining: "100M"}})
	startRanker(t, rankerOptions{scheduler: prefix, port: 10371})
	node, err := local.kube.CoreV1().Nodes().Get(ctx, nodes["node-1"], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Each case asks for more than the previous case's report gave, so the pod cannot
	// fit whether the ranker holds that report or the 100M one published before it.
	for i, tc := range []struct {
		name             string
		after            time.Duration // from the failure to the report
		required, report string
	}{
		{"report right after the failure", 0, "1G", "2G"},
		{"report while the pod waits", 3 * time.Second, "3G", "4G"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("p%d", i)
			publishBandwidth(t, node, rankerNode{name: "node-1", ingressRemaining: "100M"})
			if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, bandwidthPod(ns, name, prefix, map[string]string{
				"bandwidth.sextant.io/ingress-required": tc.required,
			}), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFailedScheduling(t, ns, name, time.Minute)
			time.Sleep(tc.after)
			reported := time.Now()
			publishBandwidth(t, node, rankerNode{name: "node-1", ingressRemaining: tc.report})
			// Far inside the 5-minute flush, with room for the ranker's backoff (1 s, doubling).
			pod := waitScheduled(t, ns, name, 15*time.Second)
			if pod.Spec.NodeName != nodes["node-1"] {
				t.Errorf("pod on %s, want %s", pod.Spec.NodeName, nodes["node-1"])
			}
			t.Logf("placed %.1fs after the report", time.Since(reported).Seconds())
			if err := local.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRankerBurstDoesNotOverfill: 20 pods requiring 100M each, created at once, onto
// nodes whose reports predate them: no node gets more than its remaining allows.
func TestRankerBurstDoesNotOverfill(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	ns := testNamespace(t)
	prefix := "burst" + strings.TrimPrefix(ns, "e2e-")
	nodes := makeRankerNodes(t, prefix, []rankerNode{
		{name: "big", ingressRemaining: "1G"}, {name: "small", ingressRemaining: "500M"}, {name: "tiny", ingressRemaining: "300M"},
	})
	capacity := map[string]int{nodes["big"]: 10, nodes["small"]: 5, nodes["tiny"]: 3}
	startRanker(t, rankerOptions{scheduler: prefix, port: 10366, strategy: "most-headroom"})
	for i := 0; i < 20; i++ {
		_, err := local.kube.CoreV1().Pods(ns).Create(ctx, bandwidthPod(ns, fmt.Sprintf("p%02d", i), prefix, map[string]string{
			"bandwidth.sextant.io/ingress-required": "100M",
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	// 18 fit in all; 2 must stay Pending.
	var placed map[string]int
	err := wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := local.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		placed = map[string]int{}
		n := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				placed[p.Spec.NodeName]++
				n++
			}
		}
		return n >= 18, nil
	})
	if err != nil {
		t.Errorf("only %v placed: %v", placed, err)
	}
	time.Sleep(5 * time.Second) // give the ranker the chance to overfill, if it would
	pods, _ := local.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	placed = map[string]int{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			placed[p.Spec.NodeName]++
		}
	}
	for node, n := range placed {
		if n > capacity[node] {
			t.Errorf("node %s got %d pods of 100M; its remaining fits %d", node, n, capacity[node])
		}
	}
	t.Logf("placement: %v", placed)
}

// TestRankerLeaderHandover: two replicas; killing the leader hands over and binding goes on.
func TestRankerLeaderHandover(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	ns := testNamespace(t)
	prefix := "ha" + strings.TrimPrefix(ns, "e2e-")
	makeRankerNodes(t, prefix, []rankerNode{{name: "n", ingressRemaining: "5G"}})
	lease := "sextant-ranker-" + prefix
	allowLease(t, "sextant-ranker", lease)
	a := startRanker(t, rankerOptions{scheduler: prefix, port: 10367, leaseName: lease})
	b := startRanker(t, rankerOptions{scheduler: prefix, port: 10368, leaseName: lease})
	create := func(name string) {
		_, err := local.kube.CoreV1().Pods(ns).Create(ctx, bandwidthPod(ns, name, prefix, map[string]string{
			"bandwidth.sextant.io/ingress-required": "10M",
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	create("before")
	waitScheduled(t, ns, "before", time.Minute)
	holder, err := leaseHolder(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	// Kill the leader without letting it release the lease.
	leader, other := a, b
	if !acquiredLease(a) {
		leader, other = b, a
	}
	_ = leader.cmd.Process.Kill()
	_, _ = leader.cmd.Process.Wait()
	create("after")
	waitScheduled(t, ns, "after", time.Minute)
	h, err := leaseHolder(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	if h == holder {
		t.Errorf("lease still held by %s after it was killed", h)
	}
	if !acquiredLease(other) {
		t.Errorf("the surviving replica never acquired the lease")
	}
}

// acquiredLease reports whether the ranker logged taking the leader lease.
func acquiredLease(p *process) bool {
	return strings.Contains(strings.ToLower(p.output()), "successfully acquired lease")
}

// leaseHolder is the identity holding the lease in the release namespace, "" for none.
func leaseHolder(ctx context.Context, lease string) (string, error) {
	l, err := local.kube.CoordinationV1().Leases(releaseNamespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("lease %s: %w", lease, err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, ""), nil
}

// allowLease lets one of the chart's ServiceAccounts hold a lease of the test's own: the
// chart grants each only its own lease name ("sextant-ranker", ...), which the chart's
// replicas hold.
func allowLease(t *testing.T, serviceAccount, lease string) {
	t.Helper()
	ctx := context.Background()
	meta := metav1.ObjectMeta{Name: "e2e-" + lease, Namespace: releaseNamespace}
	role := &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		ResourceNames: []string{lease}, Verbs: []string{"get", "update"},
	}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: meta,
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: meta.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: releaseNamespace}},
	}
	rbac := local.kube.RbacV1()
	if _, err := rbac.Roles(releaseNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("role for lease %s: %v", lease, err)
	}
	if _, err := rbac.RoleBindings(releaseNamespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("role binding for lease %s: %v", lease, err)
	}
	t.Cleanup(func() {
		_ = rbac.RoleBindings(releaseNamespace).Delete(ctx, meta.Name, metav1.DeleteOptions{})
		_ = rbac.Roles(releaseNamespace).Delete(ctx, meta.Name, metav1.DeleteOptions{})
		_ = local.kube.CoordinationV1().Leases(releaseNamespace).Delete(ctx, lease, metav1.DeleteOptions{})
	})
}

// TestRankerWritesAnnotationsBeforeBinding: a pod asking for CPUs and memory gets its
// NUMA nodes written before it is bound, seen through a watch of the pod.
func TestRankerWritesAnnotationsBeforeBinding(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	ns := testNamespace(t)
	prefix := "numa" + strings.TrimPrefix(ns, "e2e-")
	nodes := makeRankerNodes(t, prefix, []rankerNode{{name: "n", ingressRemaining: "5G"}})
	publishTopology(t, nodes["n"], 2, 4, 8<<30, 2)
	startRanker(t, rankerOptions{scheduler: prefix, port: 10369})
	// A RetryWatcher resumes a closed watch where it left off, so no state of the pod
	// goes unseen.
	list, err := local.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return local.kube.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	pod := bandwidthPod(ns, "numa", prefix, nil)
	pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
	}
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"sextant.io/gpu": resource.MustParse("2")}
	pod.Spec.Containers[0].Resources.Requests["sextant.io/gpu"] = resource.MustParse("2")
	if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(time.Minute)
	for {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				t.Fatal("the pod watch closed before the pod was bound")
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Spec.NodeName == "" {
				continue
			}
			numa := p.Annotations["numa.sextant.io/nodes"]
			if numa != "0" && numa != "1" {
				t.Errorf("pod bound with numa.sextant.io/nodes = %q, want one NUMA node", numa)
			}
			var alloc map[string][]string
			if err := json.Unmarshal([]byte(p.Annotations["devices.sextant.io/allocated"]), &alloc); err != nil || len(alloc["sextant.io/gpu"]) != 2 {
				t.Errorf("pod bound with devices.sextant.io/allocated = %q, want 2 GPUs", p.Annotations["devices.sextant.io/allocated"])
			} else {
				// GPUs 0000:0N:00.0 sit on NUMA node N/2 (see publishTopology).
				for _, id := range alloc["sextant.io/gpu"] {
					if gpuNUMA(id) != numa {
						t.Errorf("GPU %s is not on the pod's NUMA node %s", id, numa)
					}
				}
			}
			return
		case <-deadline:
			t.Fatalf("pod not bound within a minute; events: %s", podEvents(ns, "numa"))
		}
	}
}

// publishTopology gives a node numaNodes NUMA nodes of cpusPer CPUs and memPer bytes,
// with gpusPer GPUs on each (GPU i at 0000:0i:00.0), and advertises the GPUs.
func publishTopology(t *testing.T, nodeName string, numaNodes, cpusPer int, memPer int64, gpusPer int) {
	t.Helper()
	publishTopologyPinning(t, nodeName, numaNodes, cpusPer, memPer, gpusPer, "")
}

// publishTopologyPinning is publishTopology from an agent that says whether it pins.
func publishTopologyPinning(t *testing.T, nodeName string, numaNodes, cpusPer int, memPer int64, gpusPer int, pinning sextantv1.NUMAPinning) {
	t.Helper()
	ctx := context.Background()
	var topo sextantv1.Topology
	cpu := int32(0)
	gpu := 0
	for n := 0; n < numaNodes; n++ {
		nn := sextantv1.NUMANode{ID: int32(n), MemoryBytes: memPer}
		for c := 0; c < cpusPer; c++ {
			nn.CPUs = append(nn.CPUs, cpu)
			cpu++
		}
		for m := 0; m < numaNodes; m++ {
			d := int32(21)
			if m == n {
				d = 10
			}
			nn.Distances = append(nn.Distances, d)
		}
		topo.NUMANodes = append(topo.NUMANodes, nn)
		for g := 0; g < gpusPer; g++ {
			topo.PCIDevices = append(topo.PCIDevices, sextantv1.PCIDevice{
				Address: fmt.Sprintf("0000:%02x:00.0", gpu), Class: "0x030200", Vendor: "0x10de", Device: "0x20b0",
				Kind: sextantv1.KindGPU, NUMANode: ptr.To(int32(n)), Health: sextantv1.Healthy,
			})
			gpu++
		}
	}
	topo.NICs = []sextantv1.NIC{}
	node, err := local.kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nt := &sextantv1.NodeTopology{
		TypeMeta: metav1.TypeMeta{APIVersion: sextantv1.GroupVersion.String(), Kind: "NodeTopology"},
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: nodeName, UID: node.UID,
		}}},
	}
	client := local.dynamic.Resource(nodeTopologyGVR)
	created, err := client.Create(ctx, toUnstructured(t, nt), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = toUnstructured(t, &sextantv1.NodeTopology{Status: sextantv1.NodeTopologyStatus{NUMAPinning: pinning, Topology: topo}}).Object["status"]
	if _, err := client.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A merge patch, not an update of the Node read above: the fake node's keeper renews
	// its Ready condition meanwhile, and an update would conflict with that.
	patch := fmt.Sprintf(`{"status":{"capacity":{"sextant.io/gpu":"%d"},"allocatable":{"sextant.io/gpu":"%d"}}}`, gpu, gpu)
	if _, err := local.kube.CoreV1().Nodes().Patch(ctx, nodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// TestRankerLeavesNUMAToNodesThatPin: on a node whose agent does not pin (NodeTopology
// numaPinning Off), a single-numa-node pod is not placed, and a pod that only prefers
// few NUMA nodes is placed without numa.sextant.io/nodes (nobody would carry it out),
// still with its devices on one NUMA node. Once the agent says it pins, the waiting
// pod is placed, with its NUMA node.
func TestRankerLeavesNUMAToNodesThatPin(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	ns := testNamespace(t)
	prefix := "pin" + strings.TrimPrefix(ns, "e2e-")
	nodes := makeRankerNodes(t, prefix, []rankerNode{{name: "n", ingressRemaining: "5G"}})
	publishTopologyPinning(t, nodes["n"], 2, 4, 8<<30, 2, sextantv1.PinningOff)
	startRanker(t, rankerOptions{scheduler: prefix, port: 10372})
	requests := func(p *corev1.Pod, gpus string) *corev1.Pod {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}
		if gpus != "" {
			p.Spec.Containers[0].Resources.Requests["sextant.io/gpu"] = resource.MustParse(gpus)
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"sextant.io/gpu": resource.MustParse(gpus)}
		}
		return p
	}
	single := requests(bandwidthPod(ns, "single", prefix, map[string]string{"numa.sextant.io/policy": "single-numa-node"}), "")
	if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, single, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if msg := waitFailedScheduling(t, ns, "single", time.Minute); !strings.Contains(msg, "do not pin pods to NUMA nodes") {
		t.Errorf("FailedScheduling %q, want it to say the node does not pin", msg)
	}

	if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, requests(bandwidthPod(ns, "plain", prefix, nil), "2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitScheduled(t, ns, "plain", time.Minute)
	if v, ok := p.Annotations["numa.sextant.io/nodes"]; ok {
		t.Errorf("pod bound on a node that does not pin with numa.sextant.io/nodes = %q, want none", v)
	}
	var alloc map[string][]string
	if err := json.Unmarshal([]byte(p.Annotations["devices.sextant.io/allocated"]), &alloc); err != nil || len(alloc["sextant.io/gpu"]) != 2 {
		t.Errorf("pod bound with devices.sextant.io/allocated = %q, want 2 GPUs", p.Annotations["devices.sextant.io/allocated"])
	} else if a, b := gpuNUMA(alloc["sextant.io/gpu"][0]), gpuNUMA(alloc["sextant.io/gpu"][1]); a != b {
		t.Errorf("GPUs %v on NUMA nodes %s and %s, want one", alloc["sextant.io/gpu"], a, b)
	}
	if s, err := local.kube.CoreV1().Pods(ns).Get(ctx, "single", metav1.GetOptions{}); err != nil || s.Spec.NodeName != "" {
		t.Fatalf("the single-numa-node pod: err %v, bound to %q; want it Pending", err, s.Spec.NodeName)
	}

	client := local.dynamic.Resource(nodeTopologyGVR)
	nt, err := client.Get(ctx, nodes["n"], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(nt.Object, string(sextantv1.PinningActive), "status", "numaPinning"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.UpdateStatus(ctx, nt, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := waitScheduled(t, ns, "single", time.Minute).Annotations["numa.sextant.io/nodes"]; v != "0" && v != "1" {
		t.Errorf("once the node pins: numa.sextant.io/nodes = %q, want one NUMA node", v)
	}
}

func gpuNUMA(addr string) string {
	var bus int
	_, _ = fmt.Sscanf(addr, "0000:%02x:00.0", &bus)
	return fmt.Sprint(bus / 2)
}

// TestRankerChartPlacesPod: the chart's own ranker replicas (in-cluster, leader-elected,
// with the chart's RBAC and profile) bind a pod of schedulerName "sextant" on the real
// node, which runs it, with the NUMA choice of the node's real topology on it.
func TestRankerChartPlacesPod(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	ns := testNamespace(t)
	// The chart's agent publishes the node's NodeTopology; wait for it.
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := local.dynamic.Resource(sextantv1.GroupVersion.WithResource("nodetopologies")).Get(ctx, local.nodeName, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no NodeTopology for %s from the chart's agent: %v", local.nodeName, err)
	}
	pod := bandwidthPod(ns, "chart", "sextant", nil)
	pod.Spec.NodeSelector = map[string]string{"sextant.io/local": "true"}
	pod.Spec.Containers[0].Command = []string{"sh", "-c", "echo placed by sextant"}
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitScheduled(t, ns, "chart", 2*time.Minute)
	if got.Spec.NodeName != local.nodeName {
		t.Fatalf("bound to %s, want %s", got.Spec.NodeName, local.nodeName)
	}
	if v := got.Annotations["numa.sextant.io/nodes"]; v == "" {
		t.Errorf("no numa.sextant.io/nodes on the pod (annotations %v)", got.Annotations)
	}
	waitPodPhase(t, ns, "chart", corev1.PodSucceeded, 2*time.Minute)
	checkRankerGCSettings(t, ns)
}

// checkRankerGCSettings: every ranker replica of the chart runs with the chart's GC
// settings (ranker.gc: GOGC 100, GOMEMLIMIT 90% of the 1Gi memory limit), as its Go
// runtime reports them on /metrics.
func checkRankerGCSettings(t *testing.T, ns string) {
	t.Helper()
	tok := metricsReaderToken(t, ns, "gc-check")
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	want := map[string]float64{"go_gc_gogc_percent": 100, "go_gc_gomemlimit_bytes": float64(int64(1<<30) * 90 / 100)}
	deploy, err := local.kube.AppsV1().Deployments(releaseNamespace).Get(context.Background(), "sextant-ranker", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's ranker Deployment: %v", err)
	}
	replicas := int(ptr.Deref(deploy.Spec.Replicas, 1))
	// Every replica, the leader and the standbys, once ready; the binding takes effect
	// once the API server's authorizer has seen it.
	eventually(t, time.Minute, func() (bool, string) {
		targets := serviceTargets(t, "sextant-ranker-metrics", "https-metrics", false)
		if len(targets) < replicas {
			return false, fmt.Sprintf("the ranker's metrics Service has %d ready endpoints, want %d", len(targets), replicas)
		}
		for _, target := range targets {
			addr := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(target), `- targets: ["`), `"]`)
			req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := client.Do(req)
			if err != nil {
				return false, err.Error()
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				return false, fmt.Sprintf("ranker %s /metrics: HTTP %d, %v", addr, resp.StatusCode, err)
			}
			for name, value := range want {
				var got string
				for _, line := range strings.Split(string(body), "\n") {
					if v, ok := strings.CutPrefix(line, name+" "); ok {
						got = v
					}
				}
				if f, err := strconv.ParseFloat(got, 64); err != nil || f != value {
					return false, fmt.Sprintf("ranker %s: %s %q, want %v", addr, name, got, value)
				}
			}
		}
		return true, ""
	})
}

// TestRankerMalformedAnnotationStaysPending: a pod that slipped past the webhook (its
// namespace opted out) with a malformed annotation stays Pending with an event naming the
// annotation and its accepted form, and the ranker goes on placing well-formed pods.
func TestRankerMalformedAnnotationStaysPending(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	ns := testNamespace(t)
	nsObj, err := local.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels["sextant.io/webhook"] = "disabled"
	if _, err := local.kube.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	prefix := "bad" + strings.TrimPrefix(ns, "e2e-")
	nodes := makeRankerNodes(t, prefix, []rankerNode{{name: "node-1", ingressRemaining: "1G"}})
	startRanker(t, rankerOptions{scheduler: prefix, port: 10370})

	const annotation = "bandwidth.sextant.io/ingress-required"
	// The webhook may still be catching up with the namespace label: retry a refusal.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := local.kube.CoreV1().Pods(ns).Create(ctx, bandwidthPod(ns, "bad", prefix, map[string]string{annotation: "fast"}), metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("could not create the malformed pod in a namespace the webhook skips: %v", err)
	}
	msg := waitFailedScheduling(t, ns, "bad", time.Minute)
	if !strings.Contains(msg, annotation) || !strings.Contains(msg, `"fast"`) || !strings.Contains(msg, "want ") {
		t.Errorf("event %q should name %s, its value and the accepted form", msg, annotation)
	}
	t.Logf("event: %s", msg)

	// Well-formed pods still get placed: the bad one neither crashed nor stalled the ranker.
	if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, bandwidthPod(ns, "good", prefix, map[string]string{annotation: "100M"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if pod := waitScheduled(t, ns, "good", time.Minute); pod.Spec.NodeName != nodes["node-1"] {
		t.Errorf("good pod on %s, want %s", pod.Spec.NodeName, nodes["node-1"])
	}
	if bad, err := local.kube.CoreV1().Pods(ns).Get(ctx, "bad", metav1.GetOptions{}); err != nil || bad.Spec.NodeName != "" || bad.Status.Phase != corev1.PodPending {
		t.Errorf("malformed pod: err %v, node %q; want it Pending and unbound", err, bad.Spec.NodeName)
	}
}

// TestRankerBareServesSextantProfile: without --config, sextant-ranker sets up the
// profile "sextant" with every sextant plugin against the real API server, on its own
// lease, with no BandwidthAware args (its --bandwidth-* flags are them). It is asked to
// write the configuration it would run, which exits before it takes a lease or schedules
// anything, so the chart's ranker keeps serving "sextant".
func TestRankerBareServesSextantProfile(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	kubeconfig := serviceAccountKubeconfig(t, releaseNamespace, "sextant-ranker")
	written := filepath.Join(t.TempDir(), "written.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, rankerBinary(t), "--kubeconfig", kubeconfig, "--secure-port=0",
		"--bandwidth-strategy=most-headroom", "--write-config-to", written).CombinedOutput()
	if err != nil {
		t.Fatalf("sextant-ranker without --config: %v\n%s", err, lastLines(string(out), 40))
	}
	data, err := os.ReadFile(written)
	if err != nil {
		t.Fatal(err)
	}
	var cfg schedconfigv1.KubeSchedulerConfiguration
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("the written configuration: %v\n%s", err, data)
	}
	if len(cfg.Profiles) != 1 || ptr.Deref(cfg.Profiles[0].SchedulerName, "") != profile.SchedulerName {
		t.Fatalf("the bare ranker serves profiles %s, want only %q", data, profile.SchedulerName)
	}
	if cfg.LeaderElection.ResourceName != "sextant-ranker" {
		t.Errorf("the bare ranker's lease is %q, want sextant-ranker", cfg.LeaderElection.ResourceName)
	}
	p := cfg.Profiles[0]
	names := func(ps []schedconfigv1.Plugin) []string {
		var n []string
		for _, p := range ps {
			n = append(n, p.Name)
		}
		return n
	}
	enabled := names(p.Plugins.MultiPoint.Enabled)
	for _, want := range []string{"BandwidthAware", "NUMAAware", "DeviceAware", "SextantBinder"} {
		if !slices.Contains(enabled, want) {
			t.Errorf("the bare profile does not enable %s: multiPoint %v", want, enabled)
		}
	}
	if slices.Contains(enabled, "DefaultBinder") {
		t.Errorf("the bare profile enables DefaultBinder: multiPoint %v", enabled)
	}
	if filters := names(p.Plugins.Filter.Enabled); len(filters) < 3 || !slices.Equal(filters[:3], []string{"BandwidthAware", "NUMAAware", "DeviceAware"}) {
		t.Errorf("the bare profile's Filters %v, want sextant's first", filters)
	}
	for _, pc := range p.PluginConfig {
		if pc.Name == "BandwidthAware" {
			t.Errorf("the bare profile has BandwidthAware args %s: they would override the --bandwidth-* flags", pc.Args.Raw)
		}
	}
}
