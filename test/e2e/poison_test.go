//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestPoisonHeartbeatsKeepRankerUp: heartbeats that any agent's credentials can write
// neither wedge nor crash the chart's ranker.
//   - What the CRDs of older charts let through and the ranker could not decode (a
//     window of "soon", a quantity of 1e.5, a lower-case timestamp) the API server now
//     refuses.
//   - What it still accepts but the ranker cannot use (a rate beyond int64 bits/s, a
//     topology listing one CPU on two NUMA nodes) leaves its node without a report,
//     and a report over a window shorter than the ranker's min-window (a restarted
//     agent's) is not used.
//   - With those objects present, both ranker pods restarted become Ready, stay up, and
//     place pods on the node with a usable report.
//
// Before the fix the restarted pods crash-looped (the heartbeat store never synced).
func TestPoisonHeartbeatsKeepRankerUp(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	ns := testNamespace(t)
	prefix := "poison" + strings.TrimPrefix(ns, "e2e-")
	nodes := makeRankerNodes(t, prefix, []rankerNode{
		{name: "good", ingressRemaining: "5G"},
		{name: "poisoned", ingressRemaining: "9G"},
		{name: "partial", ingressRemaining: "9G"},
		{name: "bad-topology", ingressRemaining: "9G"},
	})

	// Refused by the API server.
	for _, c := range []struct {
		name  string
		value any
		path  []string
	}{
		{"window soon", "soon", []string{"window"}},
		{"quantity 1e.5", "1e.5", []string{"total", "ingress", "capacity"}},
		{"negative integer rate", int64(-5), []string{"total", "ingress", "rate"}},
		{"lower-case timestamp", "2026-01-02t15:04:05z", []string{"sampleTime"}},
	} {
		err := updateBandwidthStatus(ctx, nodes["poisoned"], func(status map[string]any) error {
			return unstructured.SetNestedField(status, c.value, c.path...)
		})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: the API server answered %v, want Invalid", c.name, err)
		}
	}

	// Accepted, and unusable: a capacity of 100E (10^20 bits/s) decodes and is beyond
	// what the ranker can count in.
	if err := updateBandwidthStatus(ctx, nodes["poisoned"], func(status map[string]any) error {
		if err := unstructured.SetNestedField(status, "100E", "total", "ingress", "capacity"); err != nil {
			return err
		}
		return unstructured.SetNestedField(status, "90E", "total", "ingress", "remaining")
	}); err != nil {
		t.Fatalf("a NodeBandwidth with a capacity of 100E: %v; the CRD should accept it", err)
	}
	publishTopology(t, nodes["bad-topology"], 2, 2, 1<<30, 0)
	if err := updateTopologyStatus(ctx, nodes["bad-topology"], func(status map[string]any) error {
		// CPU 0 on both NUMA nodes: each list is a valid set, the whole is not.
		numa, _, err := unstructured.NestedSlice(status, "numaNodes")
		if err != nil || len(numa) < 2 {
			return fmt.Errorf("published NUMA nodes %v: %w", numa, err)
		}
		second, ok := numa[1].(map[string]any)
		if !ok {
			return fmt.Errorf("NUMA node %v is not an object", numa[1])
		}
		second["cpus"] = []any{int64(0), int64(3)}
		return unstructured.SetNestedSlice(status, numa, "numaNodes")
	}); err != nil {
		t.Fatalf("a NodeTopology with CPU 0 on two NUMA nodes: %v; the CRD should accept it", err)
	}
	// The good and the partial node keep reporting, as agents do, so that their
	// reports stay fresh however long the restart takes; the partial one over 5s.
	stopReports := keepReporting(t, []string{nodes["good"], nodes["partial"]}, map[string]string{nodes["partial"]: "5s"}, 0)
	defer stopReports()

	restartRanker(t)

	// The restarted pods place pods, on the node with a usable report only.
	for i := range 3 {
		name := fmt.Sprintf("p%d", i)
		pod := bandwidthPod(ns, name, prefix, map[string]string{"bandwidth.sextant.io/ingress-required": "100M"})
		pod.Spec.SchedulerName = "sextant"
		if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := waitScheduled(t, ns, name, 2*time.Minute); got.Spec.NodeName != nodes["good"] {
			t.Errorf("pod %s on %s, want the good node %s (poisoned %s, partial %s, bad topology %s)",
				name, got.Spec.NodeName, nodes["good"], nodes["poisoned"], nodes["partial"], nodes["bad-topology"])
		}
	}
	// A pod only the partial node may take waits, and says why.
	only := bandwidthPod(ns, "partial-only", prefix, map[string]string{"bandwidth.sextant.io/ingress-required": "100M"})
	only.Spec.SchedulerName = "sextant"
	only.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{nodes["partial"]}}},
		}}},
	}}
	if _, err := local.kube.CoreV1().Pods(ns).Create(ctx, only, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if msg := waitFailedScheduling(t, ns, "partial-only", time.Minute); !strings.Contains(msg, "partial NodeBandwidth") {
		t.Errorf("FailedScheduling %q, want it to name the partial NodeBandwidth", msg)
	}

	// Each rejection was logged by the restarted pods, naming the kind, node and reason
	// (the chart's logFormat is json).
	eventually(t, time.Minute, func() (bool, string) {
		logs := rankerLogs(t)
		for _, want := range [][]string{
			{`"kind":"NodeBandwidth"`, `"node":"` + nodes["poisoned"] + `"`, `"reason":"out_of_range"`},
			{`"kind":"NodeTopology"`, `"node":"` + nodes["bad-topology"] + `"`, `"reason":"inconsistent"`},
		} {
			if !hasLineWith(logs, want...) {
				return false, fmt.Sprintf("no ranker log line with %q; the last lines:\n%s", want, lastLines(logs, 20))
			}
		}
		return true, ""
	})
	// What the real node's agent publishes is never rejected.
	if logs := rankerLogs(t); hasLineWith(logs, "Ignoring a heartbeat object", `"node":"`+local.nodeName+`"`) {
		t.Errorf("the ranker rejected a heartbeat of the real node %s, which its agent wrote:\n%s", local.nodeName, lastLines(logs, 20))
	}
	// And nothing restarted meanwhile.
	for _, p := range rankerPods(t) {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("ranker %s restarted %d times with poison present", p.Name, cs.RestartCount)
			}
		}
	}
}

// updateBandwidthStatus changes the node's NodeBandwidth status with change and writes
// it through the status subresource, returning the API server's answer.
func updateBandwidthStatus(ctx context.Context, node string, change func(map[string]any) error) error {
	return updateStatus(ctx, local.dynamic.Resource(nodeBandwidthGVR), node, change)
}

func updateTopologyStatus(ctx context.Context, node string, change func(map[string]any) error) error {
	return updateStatus(ctx, local.dynamic.Resource(nodeTopologyGVR), node, change)
}

func updateStatus(ctx context.Context, client interface {
	Get(context.Context, string, metav1.GetOptions, ...string) (*unstructured.Unstructured, error)
	UpdateStatus(context.Context, *unstructured.Unstructured, metav1.UpdateOptions) (*unstructured.Unstructured, error)
}, name string, change func(map[string]any) error) error {
	obj, err := client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	status, _ := obj.Object["status"].(map[string]any)
	if status == nil {
		status = map[string]any{}
	}
	if err := change(status); err != nil {
		return err
	}
	obj.Object["status"] = status
	_, err = client.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	return err
}

// keepReporting rewrites the nodes' NodeBandwidth every 2s with a new sampleTime, skew
// off the test's clock (and, for the nodes in windows, that window), until the
// returned stop is called.
func keepReporting(t *testing.T, nodes []string, windows map[string]string, skew time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	report := func() {
		for _, n := range nodes {
			err := updateBandwidthStatus(ctx, n, func(status map[string]any) error {
				if err := unstructured.SetNestedField(status, time.Now().Add(skew).UTC().Format(time.RFC3339), "sampleTime"); err != nil {
					return err
				}
				if w, ok := windows[n]; ok {
					return unstructured.SetNestedField(status, w, "window")
				}
				return nil
			})
			if err != nil && ctx.Err() == nil {
				t.Logf("report for %s: %v", n, err)
			}
		}
	}
	report()
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				report()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() { cancel(); <-done }
}

func rankerPods(t *testing.T) []corev1.Pod {
	t.Helper()
	pods, err := local.kube.CoreV1().Pods(releaseNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=ranker"})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// restartRanker deletes the chart's ranker pods and waits until the Deployment's
// replicas run again as new pods, all Ready.
func restartRanker(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	deploy, err := local.kube.AppsV1().Deployments(releaseNamespace).Get(ctx, "sextant-ranker", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's ranker Deployment: %v", err)
	}
	replicas := int(ptr.Deref(deploy.Spec.Replicas, 1))
	old := map[types.UID]bool{}
	for _, p := range rankerPods(t) {
		old[p.UID] = true
		if err := local.kube.CoreV1().Pods(releaseNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete ranker pod %s: %v", p.Name, err)
		}
	}
	if len(old) == 0 {
		t.Fatal("the chart runs no ranker pods")
	}
	eventually(t, 3*time.Minute, func() (bool, string) {
		var ready, fresh int
		var states []string
		for _, p := range rankerPods(t) {
			if old[p.UID] || p.DeletionTimestamp != nil {
				continue
			}
			fresh++
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
			for _, cs := range p.Status.ContainerStatuses {
				states = append(states, fmt.Sprintf("%s ready=%v restarts=%d %+v", p.Name, cs.Ready, cs.RestartCount, cs.State))
			}
		}
		return fresh == replicas && ready == replicas, fmt.Sprintf("%d of %d restarted ranker pods Ready (%d new): %v", ready, replicas, fresh, states)
	})
}

// rankerLogs is the logs of every ranker pod of the chart, one after the other.
func rankerLogs(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, p := range rankerPods(t) {
		logs, err := local.kube.CoreV1().Pods(releaseNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: "ranker"}).DoRaw(context.Background())
		if err != nil {
			fmt.Fprintf(&b, "logs of %s: %v\n", p.Name, err)
			continue
		}
		b.Write(logs)
	}
	return b.String()
}

// hasLineWith reports whether one line of logs contains every one of parts.
func hasLineWith(logs string, parts ...string) bool {
	for _, line := range strings.Split(logs, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
