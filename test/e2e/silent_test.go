//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/sidecarrules"
	"sextant.io/sextant/ranker/plugins/silence"
)

// TestNUMASilentAgentGetsNoDecisions: the local node's agent stops and stays away past
// the ranker's silence bound (silence.After, 2 minutes without a NodeBandwidth), while
// its NodeTopology still says numaPinning Active. A single-numa-node pod then stays
// Pending, its PodScheduled condition naming the silent agent, and a pod that only
// prefers few NUMA nodes is placed without numa.sextant.io/nodes: nobody would pin it.
// Once the agent is back, its first report brings the waiting pod back, and it is
// placed and pinned from its first instruction.
func TestNUMASilentAgentGetsNoDecisions(t *testing.T) {
	h := newNUMAHarness(t)
	ctx := context.Background()

	h.agent.stop()
	// Durable evidence that the ranker counts the node silent: the last NodeBandwidth's
	// status write is older than the bound (with room for its delivery), and only
	// grows older while the agent is away.
	eventually(t, 4*time.Minute, func() (bool, string) {
		nbw, err := getNodeBandwidth(ctx, local.nodeName)
		if err != nil {
			return false, err.Error()
		}
		written := lastStatusWrite(nbw.ManagedFields)
		if st := nbw.Status.SampleTime; st != nil && st.After(written) {
			written = st.Time
		}
		if written.IsZero() {
			return false, "the NodeBandwidth has no status write time"
		}
		age := time.Since(written)
		return age > silence.After+15*time.Second, fmt.Sprintf("the NodeBandwidth was written %s ago, want more than %s", age.Round(time.Second), silence.After+15*time.Second)
	})
	if nt, err := getNodeTopology(ctx, local.nodeName); err != nil || !nt.Status.NUMAPinning.Pins() {
		t.Fatalf("setup: the silent node's NodeTopology must still say it pins: %v, %v", nt, err)
	}

	h.create(h.pod("single", nil, h.container("main", loop)))
	plain := h.pod("plain", nil, h.container("main", loop))
	delete(plain.Annotations, annotations.NUMAPolicy)
	h.create(plain)

	const silent = "no agent heartbeat (NodeBandwidth) within the last 2m0s"
	eventually(t, 2*time.Minute, func() (bool, string) {
		p, err := local.kube.CoreV1().Pods(h.ns).Get(ctx, "single", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("the single-numa-node pod was bound to %s with its agent silent", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, silent) {
				t.Logf("single: PodScheduled %s: %s", c.Reason, c.Message)
				return true, ""
			}
		}
		return false, fmt.Sprintf("single: conditions %+v, want PodScheduled False naming the silent agent", p.Status.Conditions)
	})
	p := waitScheduled(t, h.ns, "plain", 2*time.Minute)
	if v, ok := p.Annotations[annotations.NUMANodes]; ok {
		t.Errorf("a pod placed on the silent node got %s=%q, want no NUMA decision", annotations.NUMANodes, v)
	}
	if s, err := local.kube.CoreV1().Pods(h.ns).Get(ctx, "single", metav1.GetOptions{}); err != nil || s.Spec.NodeName != "" {
		t.Fatalf("single: err %v, bound to %q; want it still Pending while the agent is away", err, s.Spec.NodeName)
	}

	h.agent.start()
	cpus := h.want("single")
	h.checkFirst("single", "main", cpus)
	pinnedEvent(t, h.ns, "single", "pod-cgroup")
}

// lastStatusWrite is when the status subresource was last written, from the object's
// managed fields (the API server's clock).
func lastStatusWrite(fields []metav1.ManagedFieldsEntry) time.Time {
	var last time.Time
	for _, f := range fields {
		if f.Subresource == "status" && f.Time != nil && f.Time.After(last) {
			last = f.Time.Time
		}
	}
	return last
}

// TestAgentAfterContainerdRestart: containerd restarts (scripts/cluster.sh
// restart-containerd), making a new socket file; the running containers outlive it.
// With the chart's default mount of the socket's directory, the agent reaches the new
// socket by itself, without a restart; mounting the socket file alone
// (sidecar.criMount: socket), its CRI connection stays on the old socket until its
// liveness probe fails (--cri-liveness-deadline) and the kubelet restarts it (the
// restart count and the last state say so). Either way a Job with a sidecar started
// afterwards completes, its sidecar stopped by the agent (SidecarStopped).
func TestAgentAfterContainerdRestart(t *testing.T) {
	requireRoot(t)
	installCRDs(t)
	deployChart(t)
	ns := testNamespace(t)
	t.Cleanup(func() { releaseHealthy(t) })

	t.Run("directory", func(t *testing.T) {
		before := chartAgent(t)
		restartContainerd(t)
		runSidecarJob(t, ns, "after-restart")
		after := chartAgent(t)
		if after.UID != before.UID || agentRestarts(after) != agentRestarts(before) {
			t.Errorf("the agent was restarted (pod %s, %d restarts; was %s, %d); with the socket's directory mounted it should reconnect by itself",
				after.Name, agentRestarts(after), before.Name, agentRestarts(before))
		}
	})

	t.Run("socket", func(t *testing.T) {
		upgradeRelease(t, "sidecar.criMount=socket")
		t.Cleanup(func() { upgradeRelease(t, "sidecar.criMount=directory") })
		before := chartAgent(t)
		restartContainerd(t)
		var after *corev1.Pod
		eventually(t, 5*time.Minute, func() (bool, string) {
			after = chartAgent(t)
			return agentRestarts(after) > agentRestarts(before), fmt.Sprintf("the agent %s has restarted %d times, as before containerd restarted", after.Name, agentRestarts(after))
		})
		for _, c := range after.Status.ContainerStatuses {
			if c.Name == "agent" {
				if c.LastTerminationState.Terminated == nil {
					t.Errorf("the restarted agent has no terminated last state: %+v", c.LastTerminationState)
				} else {
					t.Logf("the agent's last state: %s, exit %d", c.LastTerminationState.Terminated.Reason, c.LastTerminationState.Terminated.ExitCode)
				}
			}
		}
		// The kubelet says why it restarted the agent: its liveness probe.
		eventually(t, time.Minute, func() (bool, string) {
			events, err := local.kube.CoreV1().Events(releaseNamespace).List(context.Background(), metav1.ListOptions{
				FieldSelector: "involvedObject.name=" + after.Name + ",reason=Killing"})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range events.Items {
				if strings.Contains(e.Message, "failed liveness probe") {
					t.Logf("agent event: %s", e.Message)
					return true, ""
				}
			}
			return false, fmt.Sprintf("no Killing event naming the liveness probe on %s (%d Killing events)", after.Name, len(events.Items))
		})
		waitAgentReady(t)
		runSidecarJob(t, ns, "after-liveness-restart")
	})
}

// restartContainerd restarts the local cluster's containerd.
func restartContainerd(t *testing.T) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(t), "scripts", "cluster.sh"), "restart-containerd")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("restart containerd: %v\n%s", err, out)
	}
}

// upgradeRelease changes one value of the chart's release, keeping the others, and
// waits for the rollout.
func upgradeRelease(t *testing.T, set string) {
	t.Helper()
	cmd := exec.Command("go", "tool", "helm", "upgrade", "sextant", "charts/sextant", "--namespace", releaseNamespace,
		"--kubeconfig", os.Getenv("KUBECONFIG"), "--reuse-values", "--set", set, "--wait", "--timeout", "5m")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm upgrade --set %s: %v\n%s", set, err, out)
	}
	waitAgentReady(t)
}

// chartAgent is the chart's agent pod on the local node.
func chartAgent(t *testing.T) *corev1.Pod {
	t.Helper()
	list, err := local.kube.CoreV1().Pods(releaseNamespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + local.nodeName})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			return &list.Items[i]
		}
	}
	t.Fatalf("no chart agent on %s", local.nodeName)
	return nil
}

func agentRestarts(p *corev1.Pod) int32 {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "agent" {
			return c.RestartCount
		}
	}
	return 0
}

func waitAgentReady(t *testing.T) {
	t.Helper()
	eventually(t, 3*time.Minute, func() (bool, string) {
		p := chartAgent(t)
		return podReady(p), fmt.Sprintf("the chart's agent %s is not Ready", p.Name)
	})
}

// releaseHealthy waits for every pod of the release to be Ready again, so that the
// tests after this one find the cluster as they expect it.
func releaseHealthy(t *testing.T) {
	t.Helper()
	eventually(t, 3*time.Minute, func() (bool, string) {
		list, err := local.kube.CoreV1().Pods(releaseNamespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && !podReady(&p) {
				return false, fmt.Sprintf("pod %s of the release is not Ready", p.Name)
			}
		}
		return true, ""
	})
}

// runSidecarJob runs a Job whose main container exits 0 beside a sidecar that would
// run for an hour, through the chart's webhook and agent, and waits for it to complete:
// only the agent stopping the sidecar lets it. The pod's SidecarStopped event, recorded
// by the agent, and the sidecar's terminated state are the evidence.
func runSidecarJob(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	main := corev1.Container{Name: "main", Image: busyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", "sleep 2"},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m")}}}
	side := corev1.Container{Name: "proxy", Image: busyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
		Env: []corev1.EnvVar{{Name: sidecarrules.EnvSidecar, Value: "true"}}}
	_, err := local.kube.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"job": name}},
				Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					NodeSelector:                  map[string]string{"sextant.io/local": "true"},
					TerminationGracePeriodSeconds: ptr.To[int64](10),
					Containers:                    []corev1.Container{main, side},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create job %s: %v", name, err)
	}
	eventually(t, 3*time.Minute, func() (bool, string) {
		j, err := local.kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range j.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				continue
			}
			switch c.Type {
			case batchv1.JobComplete:
				return true, ""
			case batchv1.JobFailed:
				t.Fatalf("job %s failed: %s", name, c.Message)
			}
		}
		return false, fmt.Sprintf("job %s not complete: %+v", name, j.Status)
	})
	pods, err := local.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job=" + name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("job %s: %d pods, %v; want one", name, len(pods.Items), err)
	}
	pod := pods.Items[0]
	eventually(t, time.Minute, func() (bool, string) {
		evs, err := local.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=SidecarStopped,involvedObject.name=" + pod.Name})
		if err != nil {
			return false, err.Error()
		}
		return len(evs.Items) > 0, fmt.Sprintf("no SidecarStopped event on %s", pod.Name)
	})
	for _, s := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if s.Name == "proxy" && s.State.Terminated == nil {
			t.Errorf("job %s: the sidecar's state is %+v, want terminated", name, s.State)
		}
	}
}
