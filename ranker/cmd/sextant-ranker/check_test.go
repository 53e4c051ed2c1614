package main

import (
	"context"
	"errors"
	"io"
	"sextant.io/sextant/internal/flagcheck/flagchecktest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"sextant.io/sextant/internal/charttest"
)

func agentPod(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sextant-system",
		Labels: map[string]string{"app.kubernetes.io/name": "sextant", "app.kubernetes.io/component": "agent"}},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

func nodeBandwidth(node string, sampled time.Time) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "sextant.io/v1alpha1", "kind": "NodeBandwidth",
		"metadata": map[string]any{"name": node},
		"status":   map[string]any{"sampleTime": sampled.UTC().Format(time.RFC3339)},
	}}
}

// The helm test passes only when every running agent's node has a fresh report and the
// ranker binds the test pod; otherwise it names the node or the pod.
func TestCheck(t *testing.T) {
	o := checkOptions{namespace: "sextant-system", probeNamespace: "sextant-check", agentSelector: "app.kubernetes.io/name=sextant,app.kubernetes.io/component=agent",
		freshWithin: time.Minute, schedulerName: "sextant", image: "sextant.local/sextant-ranker:dev", command: []string{"true"}}
	run := func(bind bool, reports ...runtime.Object) error {
		kube := fake.NewClientset(agentPod("a1", "n1"), agentPod("a2", "n2"))
		var created *corev1.Pod
		kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
			p.Name = p.GenerateName + "x"
			if bind && p.Spec.SchedulerName == "sextant" {
				p.Spec.NodeName = "n1"
			}
			created = p
			return false, nil, nil
		})
		dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{nodeBandwidths: "NodeBandwidthList"}, reports...)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		err := runCheck(ctx, kube, dyn, o, io.Discard)
		if created != nil {
			if created.Namespace != o.probeNamespace {
				t.Errorf("the test pod ran in %q, want the probe namespace %q", created.Namespace, o.probeNamespace)
			}
			if _, gerr := kube.CoreV1().Pods(created.Namespace).Get(context.Background(), created.Name, metav1.GetOptions{}); gerr == nil {
				t.Errorf("the test pod %s was not deleted", created.Name)
			}
		}
		return err
	}
	now := time.Now()
	if err := run(true, nodeBandwidth("n1", now), nodeBandwidth("n2", now)); err != nil {
		t.Errorf("a working installation: %v", err)
	}
	if err := run(true, nodeBandwidth("n1", now), nodeBandwidth("n2", now.Add(-5*time.Minute))); err == nil || !strings.Contains(err.Error(), "n2: NodeBandwidth sampled") {
		t.Errorf("a stale report: %v, want an error naming n2", err)
	}
	if err := run(true, nodeBandwidth("n1", now)); err == nil || !strings.Contains(err.Error(), "n2: no NodeBandwidth") {
		t.Errorf("a node without a report: %v, want an error naming n2", err)
	}
	if err := run(false, nodeBandwidth("n1", now), nodeBandwidth("n2", now)); err == nil || !strings.Contains(err.Error(), "did not place") {
		t.Errorf("a ranker that places nothing: %v", err)
	}

	// An API server that does not answer is named as such, not as agents not reporting.
	kube := fake.NewClientset()
	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := runCheck(ctx, kube, dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), o, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "could not list the agent pods") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("an unreachable API server: %v, want an error saying the agent pods could not be listed, and why", err)
	}
}

// check refuses, before it makes a client, flags it cannot work with: a timeout that
// has already passed, a selector the API server would refuse, a test pod the API server
// would refuse.
func TestCheckFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	base := []string{"--namespace", "sextant-system", "--image", "ghcr.io/sextant/sextant-ranker:v1"}
	flagchecktest.Run(t, []flagchecktest.Case{
		{"defaults", base, ""},
		{"no namespace", []string{"--image", "i"}, "--namespace (or $POD_NAMESPACE) is required: the release's namespace"},
		{"bad namespace", []string{"--namespace", "Sextant", "--image", "i"}, `--namespace "Sextant": want a namespace: `},
		{"no image", []string{"--namespace", "ns"}, "--image is required: the image of the test pod, such as the ranker's"},
		{"bad probe namespace", append(base, "--probe-namespace", "Probe_NS"), `--probe-namespace "Probe_NS": want a namespace: `},
		{"bad image", []string{"--namespace", "ns", "--image", "not a valid image ref!!"}, `--image "not a valid image ref!!"` + flagchecktest.ImageForm},
		{"timeout 0", append(base, "--timeout", "0s"), "--timeout 0s: want a positive duration such as 3m"},
		{"timeout -1s", append(base, "--timeout", "-1s"), "--timeout -1s: want a positive duration such as 3m"},
		{"fresh within -5s", append(base, "--fresh-within", "-5s"), "--fresh-within -5s: want a positive duration such as 90s"},
		{"bad agent selector", append(base, "--agent-selector", "a=(b"), `--agent-selector "a=(b": want a label selector such as app=x,tier in (a,b): `},
		{"empty agent selector", append(base, "--agent-selector", ""), "--agent-selector is empty: want a label selector of the agent pods such as app.kubernetes.io/component=agent"},
		{"empty scheduler name", append(base, "--scheduler-name", ""), "--scheduler-name is empty: want a scheduler name"},
		{"bad scheduler name", append(base, "--scheduler-name", "Sextant Ranker"), `--scheduler-name "Sextant Ranker": want a scheduler name: `},
		{"empty command", append(base, "--command", ""), `--command "": want a command of --image that exits 0, such as /usr/local/bin/sextant-ranker,--version`},
	}, checkCommand, checkOptions.validate)
}

// Nothing the chart renders, the helm test's hooks included, may create pods in the
// release's namespace: that right starts a pod as the agent's service account on any
// node, or as the ranker's. The check's probe runs in a namespace of its own, under the
// restricted Pod Security level, and the check is told so.
func TestChartCheckCreatesPodsOnlyInItsProbeNamespace(t *testing.T) {
	rendered := charttest.Render(t, nil)
	objs := charttest.Objects(t, rendered)
	const probe = "sextant-check"
	ns := objs["Namespace/"+probe]
	if ns == nil {
		t.Fatalf("no Namespace %s rendered", probe)
	}
	if labels, _ := ns["metadata"].(map[string]any)["labels"].(map[string]any); labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace %s: labels %v, want pod-security.kubernetes.io/enforce=restricted", probe, labels)
	}
	creators := 0
	for _, obj := range charttest.List(t, rendered) {
		kind, _ := obj["kind"].(string)
		if kind != "Role" && kind != "ClusterRole" {
			continue
		}
		namespace, _ := obj["metadata"].(map[string]any)["namespace"].(string)
		key := kind + "/" + namespace + "/" + obj["metadata"].(map[string]any)["name"].(string)
		rules, _ := obj["rules"].([]any)
		for _, r := range rules {
			rule := r.(map[string]any)
			resources, verbs := charttest.Strings(rule["resources"]), charttest.Strings(rule["verbs"])
			if !slices.ContainsFunc(resources, func(s string) bool { return s == "pods" || s == "*" }) ||
				!slices.ContainsFunc(verbs, func(s string) bool { return s == "create" || s == "*" }) {
				continue
			}
			if kind == "ClusterRole" || namespace != probe {
				t.Errorf("%s (namespace %q) grants %v on %v: pods may be created only in %s", key, namespace, verbs, resources, probe)
			}
			creators++
		}
	}
	if creators != 1 {
		t.Errorf("%d rules grant creating pods, want the check's one in %s", creators, probe)
	}
	args := strings.Join(charttest.Strings(charttest.Containers(objs["Pod/sextant-check"])[0]["args"]), " ")
	if !strings.Contains(args, "--probe-namespace="+probe) {
		t.Errorf("the check's args %s: want --probe-namespace=%s", args, probe)
	}
}

// --version, a global flag every subcommand lists, prints the version and exits 0 there
// too, before any flag of the subcommand is checked.
func TestSubcommandVersionFlag(t *testing.T) {
	for _, sub := range []string{"check"} {
		for _, tc := range []struct{ flag, want string }{
			{"--version", "sextant-ranker dev (kube-scheduler v0.0.0-master+$Format:%H$)\n"},
			{"--version=raw", "version.Info{"},
		} {
			root := newSchedulerCommand()
			root.AddCommand(newCheckCommand())
			var out strings.Builder
			root.SetOut(&out)
			root.SetArgs([]string{sub, tc.flag})
			err := root.Execute()
			// The flag is kube-scheduler's global one: put it back for the other tests.
			_ = root.Flags().Set("version", "false")
			if err != nil {
				t.Errorf("%s %s: %v", sub, tc.flag, err)
			} else if !strings.HasPrefix(out.String(), tc.want) {
				t.Errorf("%s %s printed %q, want %q", sub, tc.flag, out.String(), tc.want)
			}
		}
	}
}

// check validates in RunE, before it loads a kubeconfig: the error is the flag's, not the
// missing file's.
func TestCheckValidatesBeforeClients(t *testing.T) {
	cmd := newCheckCommand()
	cmd.SetArgs([]string{"--namespace", "ns", "--image", "i", "--timeout", "0s", "--kubeconfig", "/nonexistent/kubeconfig"})
	cmd.SetOut(new(strings.Builder))
	cmd.SetErr(new(strings.Builder))
	if want := "--timeout 0s: want a positive duration such as 3m"; func() string {
		err := cmd.Execute()
		if err == nil {
			return ""
		}
		return err.Error()
	}() != want {
		t.Errorf("check with --timeout 0s: want the error %q", want)
	}
}
