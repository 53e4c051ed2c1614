//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/annotations"
	sextantv1 "sextant.io/sextant/api/v1alpha1"
)

// The chart's accounts, as the API server names them.
var (
	agentUser      = "system:serviceaccount:" + releaseNamespace + ":sextant-agent"
	rankerUser     = "system:serviceaccount:" + releaseNamespace + ":sextant-ranker"
	webhookUser    = "system:serviceaccount:" + releaseNamespace + ":sextant-webhook"
	controllerUser = "system:serviceaccount:" + releaseNamespace + ":sextant-virtual-node-controller"
)

const nodeClaim = "authentication.kubernetes.io/node-name"

// impersonate returns clients that act as user with the extra attributes, as the API
// server sees a request with a token that carries them (e.g. a pod-bound token's node
// claim). Impersonating a service account's name gives it that account's groups.
func impersonate(t *testing.T, user string, extra map[string][]string) (kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	cfg := rest.CopyConfig(local.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Extra: extra}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube, dyn
}

// deniedBy reports whether err is the named ValidatingAdmissionPolicy's refusal (and not,
// say, RBAC's: every refusal a test expects must come from the policy it tests).
func deniedBy(err error, policy string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
}

func wantDenied(t *testing.T, err error, policy, what string) {
	t.Helper()
	if !deniedBy(err, policy) {
		t.Errorf("%s: got %v, want a refusal by the policy %s", what, err, policy)
	}
}

func wantAllowed(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want it allowed", what, err)
	}
}

var dryRun = []string{metav1.DryRunAll}

// waitPolicy waits until the API server enforces a policy the chart just installed (it
// loads them asynchronously): until probe, a dry run the policy refuses, is refused.
func waitPolicy(t *testing.T, policy string, probe func() error) {
	t.Helper()
	eventually(t, time.Minute, func() (bool, string) {
		err := probe()
		return deniedBy(err, policy), fmt.Sprintf("the policy %s is not enforced yet: the probe got %v", policy, err)
	})
}

func heartbeat(gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	kind := map[string]string{"nodebandwidths": "NodeBandwidth", "nodetopologies": "NodeTopology"}[gvr.Resource]
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sextantv1.GroupVersion.WithKind(kind))
	u.SetName(name)
	return u
}

// TestSecurityAgentWritesOnlyItsNode: the chart's agent account, with the node claim of
// a token bound to node A, writes A's NodeBandwidth and NodeTopology and the sextant.io/
// resources of A's status, and nothing for node B, nothing else of A's status, and
// nothing at all without the claim; it records events on pods as A only. The chart's
// own agent (a pod on the local node, with the kubelet's pod-bound token) keeps
// publishing under the policies.
func TestSecurityAgentWritesOnlyItsNode(t *testing.T) {
	deployChart(t)
	ctx := context.Background()
	a, b := fakeNode(t, "e2e-sec-a-"), fakeNode(t, "e2e-sec-b-")
	kubeA, agentA := impersonate(t, agentUser, map[string][]string{nodeClaim: {a.Name}})
	kubeNoClaim, agentNoClaim := impersonate(t, agentUser, nil)
	for _, gvr := range []schema.GroupVersionResource{nodeBandwidthGVR, nodeTopologyGVR} {
		t.Cleanup(func() {
			_ = local.dynamic.Resource(gvr).Delete(context.Background(), a.Name, metav1.DeleteOptions{})
		})
	}

	waitPolicy(t, "sextant-agent-heartbeats", func() error {
		_, err := agentA.Resource(nodeBandwidthGVR).Create(ctx, heartbeat(nodeBandwidthGVR, b.Name), metav1.CreateOptions{DryRun: dryRun})
		return err
	})
	for _, gvr := range []schema.GroupVersionResource{nodeBandwidthGVR, nodeTopologyGVR} {
		r := agentA.Resource(gvr)
		_, err := r.Create(ctx, heartbeat(gvr, b.Name), metav1.CreateOptions{})
		wantDenied(t, err, "sextant-agent-heartbeats", "agent of A creates "+gvr.Resource+" of B")
		_, err = agentNoClaim.Resource(gvr).Create(ctx, heartbeat(gvr, a.Name), metav1.CreateOptions{})
		wantDenied(t, err, "sextant-agent-heartbeats", "agent without a node claim creates "+gvr.Resource+" of A")

		created, err := r.Create(ctx, heartbeat(gvr, a.Name), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("agent of A creates %s of A: %v, want it allowed", gvr.Resource, err)
		}
		// What the agent does next: write the status.
		if gvr == nodeBandwidthGVR {
			_ = unstructured.SetNestedField(created.Object, "30s", "status", "window")
		} else {
			_ = unstructured.SetNestedField(created.Object, []any{}, "status", "numaNodes")
		}
		updated, err := r.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		wantAllowed(t, err, "agent of A updates the status of "+gvr.Resource+" of A")
		if err == nil {
			_, err = agentNoClaim.Resource(gvr).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
			wantDenied(t, err, "sextant-agent-heartbeats", "agent without a node claim updates the status of "+gvr.Resource+" of A")
		}
	}
	// Another node's object, written by its own agent (here the admin): A's agent may
	// not touch it.
	other, err := local.dynamic.Resource(nodeBandwidthGVR).Create(ctx, heartbeat(nodeBandwidthGVR, b.Name), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = local.dynamic.Resource(nodeBandwidthGVR).Delete(context.Background(), b.Name, metav1.DeleteOptions{})
	})
	_ = unstructured.SetNestedField(other.Object, "30s", "status", "window")
	_, err = agentA.Resource(nodeBandwidthGVR).UpdateStatus(ctx, other, metav1.UpdateOptions{})
	wantDenied(t, err, "sextant-agent-heartbeats", "agent of A updates the status of B's NodeBandwidth")

	// Nodes: only A's status, only sextant.io/ resources.
	patch := func(kube kubernetes.Interface, node, body string) error {
		_, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status")
		return err
	}
	waitPolicy(t, "sextant-agent-node-status", func() error {
		_, err := kubeA.CoreV1().Nodes().Patch(ctx, b.Name, types.MergePatchType, []byte(`{"status":{"capacity":{"sextant.io/gpu":"1"}}}`),
			metav1.PatchOptions{DryRun: dryRun}, "status")
		return err
	})
	wantAllowed(t, patch(kubeA, a.Name, `{"status":{"capacity":{"sextant.io/gpu":"2"},"allocatable":{"sextant.io/gpu":"2"}}}`),
		"agent of A advertises sextant.io/gpu on A")
	if n, err := local.kube.CoreV1().Nodes().Get(ctx, a.Name, metav1.GetOptions{}); err != nil || n.Status.Capacity["sextant.io/gpu"] != *qty("2") {
		t.Errorf("node A's capacity after the agent's patch: %v (%v), want sextant.io/gpu 2", n.Status.Capacity, err)
	}
	wantDenied(t, patch(kubeA, b.Name, `{"status":{"capacity":{"sextant.io/gpu":"2"}}}`), "sextant-agent-node-status",
		"agent of A advertises sextant.io/gpu on B")
	wantDenied(t, patch(kubeNoClaim, a.Name, `{"status":{"capacity":{"sextant.io/gpu":"3"}}}`), "sextant-agent-node-status",
		"agent without a node claim advertises on A")
	for what, body := range map[string]string{
		"cpu capacity":           `{"status":{"capacity":{"cpu":"64"}}}`,
		"pods allocatable":       `{"status":{"allocatable":{"pods":"500"}}}`,
		"a foreign resource":     `{"status":{"capacity":{"example.com/gpu":"8"}}}`,
		"a condition":            `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Sextant"}]}}`,
		"a label through status": `{"metadata":{"labels":{"sextant.io/e2e":"x"}}}`,
	} {
		wantDenied(t, patch(kubeA, a.Name, body), "sextant-agent-node-status", "agent of A changes "+what+" of A")
	}

	// Events: as its own node (source.host), on pods.
	event := func(host, kind string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-sec-", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: kind, Namespace: "default", Name: "e2e-sec"},
			Reason:         "SidecarStopped", Message: "e2e", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "sextant-agent", Host: host}}
	}
	record := func(kube kubernetes.Interface, ev *corev1.Event) error {
		_, err := kube.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{DryRun: dryRun})
		return err
	}
	waitPolicy(t, "sextant-agent-events", func() error { return record(kubeA, event(b.Name, "Pod")) })
	wantAllowed(t, record(kubeA, event(a.Name, "Pod")), "agent of A records an event on a pod as A")
	wantDenied(t, record(kubeA, event(b.Name, "Pod")), "sextant-agent-events", "agent of A records an event as B")
	wantDenied(t, record(kubeA, event("", "Pod")), "sextant-agent-events", "agent of A records an event without a source host")
	wantDenied(t, record(kubeA, event(a.Name, "Node")), "sextant-agent-events", "agent of A records an event on a Node")
	wantDenied(t, record(kubeNoClaim, event(a.Name, "Pod")), "sextant-agent-events", "agent without a node claim records an event")

	// The chart's own agent writes its node's NodeBandwidth with the token the kubelet
	// mounted: the claim is there and the policy lets it through. (Skipped while
	// another test has the local node's agent stand aside.)
	node, err := local.kube.CoreV1().Nodes().Get(ctx, local.nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels["sextant.io/agent"] == "none" {
		return
	}
	start, err := getNodeBandwidth(ctx, local.nodeName)
	if err != nil {
		t.Fatalf("the chart's agent has written no NodeBandwidth for %s: %v", local.nodeName, err)
	}
	eventually(t, 90*time.Second, func() (bool, string) {
		nbw, err := getNodeBandwidth(ctx, local.nodeName)
		return err == nil && nbw.ResourceVersion != start.ResourceVersion,
			fmt.Sprintf("the chart's agent has not written the NodeBandwidth of %s since resourceVersion %s (%v)", local.nodeName, start.ResourceVersion, err)
	})
}

// TestSecurityOnlyTheRankerWritesItsDecisions: nobody, not even the cluster's admin,
// creates a pod with numa.sextant.io/nodes or devices.sextant.io/allocated or adds them
// later; they reach a pod on its Binding, which carries them only from the ranker.
// Once bound, a pod's bandwidth annotations stay as they are, and a pod created bound
// carries none; a sidecar's command
// annotation changes only to the exit command, by the virtual-node controller. The
// ranker may not patch pods.
func TestSecurityOnlyTheRankerWritesItsDecisions(t *testing.T) {
	deployChart(t)
	ctx := context.Background()
	ns := testNamespace(t)
	node := fakeNode(t, "e2e-sec-bind-")
	pods := local.kube.CoreV1().Pods(ns)
	pod := func(name string, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
			Spec: corev1.PodSpec{
				// No scheduler of that name: the pod stays unbound until the test binds it.
				SchedulerName: "sextant-e2e-nobody",
				Containers:    []corev1.Container{{Name: "main", Image: busyboxImage, ImagePullPolicy: corev1.PullNever}},
			},
		}
	}

	waitPolicy(t, "sextant-pod-annotations", func() error {
		_, err := pods.Create(ctx, pod("probe", map[string]string{annotations.NUMANodes: "0"}), metav1.CreateOptions{DryRun: dryRun})
		return err
	})
	for key, value := range map[string]string{
		annotations.NUMANodes:           "0",
		annotations.DevicesAllocated:    `{"sextant.io/gpu":["0000:3b:00.0"]}`,
		annotations.BandwidthGuaranteed: "true",
	} {
		_, err := pods.Create(ctx, pod("forged", map[string]string{key: value}), metav1.CreateOptions{})
		wantDenied(t, err, "sextant-pod-annotations", "the admin creates a pod with "+key)
	}
	// As an ordinary user with the right to create pods, too.
	user := "e2e-security-user"
	grant(t, ns, user, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "pods/binding"}, Verbs: []string{"create", "update", "patch", "get"}})
	userKube, _ := impersonate(t, user, nil)
	_, err := userKube.CoreV1().Pods(ns).Create(ctx, pod("forged", map[string]string{annotations.DevicesAllocated: `{"sextant.io/gpu":["0"]}`}), metav1.CreateOptions{})
	wantDenied(t, err, "sextant-pod-annotations", "a user creates a pod with "+annotations.DevicesAllocated)
	// A pod created on a node skips the ranker's check of what it asks for: it may not
	// ask for bandwidth, whose reservation would keep other pods off that node.
	onNode := func(ann map[string]string) *corev1.Pod {
		p := pod("on-node", ann)
		p.Spec.NodeName = node.Name
		return p
	}
	_, err = userKube.CoreV1().Pods(ns).Create(ctx, onNode(map[string]string{annotations.BandwidthPrefix + "ingress-required": "1000T"}), metav1.CreateOptions{DryRun: dryRun})
	wantDenied(t, err, "sextant-pod-annotations", "a user creates a pod on a node asking for bandwidth")
	_, err = userKube.CoreV1().Pods(ns).Create(ctx, onNode(map[string]string{"example.com/note": "x"}), metav1.CreateOptions{DryRun: dryRun})
	wantAllowed(t, err, "a user creates a pod on a node without bandwidth annotations (dry run)")
	// A limit asks for nothing: the node only caps the pod by it.
	_, err = userKube.CoreV1().Pods(ns).Create(ctx, onNode(map[string]string{annotations.EgressLimit: "100M"}), metav1.CreateOptions{DryRun: dryRun})
	wantAllowed(t, err, "a user creates a pod on a node with a bandwidth limit (dry run)")

	const sidecarKey = annotations.SidecarCommandPrefix + "proxy"
	prepared := pod("p", map[string]string{
		annotations.BandwidthPrefix + "ingress-required": "100M",
		sidecarKey: `["sleep","3600"]`,
	})
	// As the webhook leaves a pod it prepared.
	prepared.Labels = map[string]string{annotations.SidecarPrepared: "true"}
	p, err := pods.Create(ctx, prepared, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create a pod with bandwidth and command annotations: %v", err)
	}
	// Bound to a node without a kubelet, it would otherwise wait for one to confirm.
	t.Cleanup(func() {
		_ = pods.Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	annotate := func(kube kubernetes.Interface, body string) error {
		_, err := kube.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	wantDenied(t, annotate(local.kube, `{"metadata":{"annotations":{"numa.sextant.io/nodes":"1"}}}`), "sextant-pod-annotations",
		"the admin adds numa.sextant.io/nodes to a pod")
	_, err = pods.Patch(ctx, p.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"numa.sextant.io/nodes":"1"}}}`), metav1.PatchOptions{}, "status")
	wantDenied(t, err, "sextant-pod-annotations", "the admin adds numa.sextant.io/nodes through pods/status")
	wantAllowed(t, annotate(local.kube, `{"metadata":{"annotations":{"bandwidth.sextant.io/ingress-required":"200M"}}}`),
		"the admin changes the bandwidth of an unbound pod")

	// The sidecar's command: the virtual-node controller's account may swap it to the
	// exit command, and to nothing else; nobody else may change it.
	controller, _ := impersonate(t, controllerUser, nil)
	wantDenied(t, annotate(userKube, `{"metadata":{"annotations":{"`+sidecarKey+`":"[\"sh\",\"-c\",\"id\"]"}}}`), "sextant-pod-annotations",
		"a user changes a sidecar's command")
	wantDenied(t, annotate(local.kube, `{"metadata":{"annotations":{"`+sidecarKey+`":"[\"/exit0\"]"}}}`), "sextant-pod-annotations",
		"the admin swaps a sidecar's command to the exit command")
	// The controller updates pods (its role has no patch), as virtualnode does.
	update := func(name string, change func(*corev1.Pod)) error {
		cur, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(cur)
		_, err = controller.CoreV1().Pods(ns).Update(ctx, cur, metav1.UpdateOptions{DryRun: dryRun})
		return err
	}
	command := func(value *string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			if value == nil {
				delete(p.Annotations, sidecarKey)
			} else {
				p.Annotations[sidecarKey] = *value
			}
		}
	}
	image := func(img string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.Containers[0].Image = img } }
	wantDenied(t, update(p.Name, command(ptr.To(`["sh"]`))), "sextant-pod-annotations",
		"the virtual-node controller changes a sidecar's command to another than the exit command")
	wantDenied(t, update(p.Name, command(nil)), "sextant-pod-annotations", "the virtual-node controller removes a sidecar's command")
	wantAllowed(t, update(p.Name, command(ptr.To(`["/exit0"]`))), "the virtual-node controller swaps a sidecar's command to the exit command")
	// Beyond that, its updates are held to its job: the exit image, on prepared pods.
	exitImage := chartExitImage(t)
	wantAllowed(t, update(p.Name, func(p *corev1.Pod) { image(exitImage)(p); command(ptr.To(`["/exit0"]`))(p) }),
		"the virtual-node controller swaps a container to the exit image and its command to the exit command")
	waitPolicy(t, "sextant-virtual-node-controller", func() error { return update(p.Name, image("sextant.local/anything:else")) })
	wantDenied(t, update(p.Name, image("sextant.local/anything:else")), "sextant-virtual-node-controller",
		"the virtual-node controller changes a container's image to another than the exit image")
	wantDenied(t, update(p.Name, func(p *corev1.Pod) { p.Labels["example.com/x"] = "y" }), "sextant-virtual-node-controller",
		"the virtual-node controller adds a label")
	wantDenied(t, update(p.Name, func(p *corev1.Pod) { p.Annotations["example.com/x"] = "y" }), "sextant-virtual-node-controller",
		"the virtual-node controller adds an annotation")
	wantDenied(t, update(p.Name, func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "example.com/block") }), "sextant-virtual-node-controller",
		"the virtual-node controller adds a finalizer, which would keep the pod from being deleted")
	wantDenied(t, update(p.Name, func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "gone", UID: "00000000-0000-0000-0000-000000000001"})
	}), "sextant-virtual-node-controller", "the virtual-node controller adds an owner reference, which would have the garbage collector delete the pod")
	plain, err := pods.Create(ctx, pod("unprepared", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantDenied(t, update(plain.Name, image(exitImage)), "sextant-virtual-node-controller",
		"the virtual-node controller swaps a container of a pod the webhook did not prepare")

	// The Binding: from anyone but the ranker (and the cluster's admins), not with the
	// ranker's decisions; from the admin (standing in for the ranker), it puts them on
	// the pod.
	binding := func(ann map[string]string) *corev1.Binding {
		return &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Annotations: ann}, Target: corev1.ObjectReference{Kind: "Node", Name: node.Name}}
	}
	decisions := map[string]string{annotations.NUMANodes: "0", annotations.DevicesAllocated: `{"sextant.io/gpu":["0000:3b:00.0"]}`,
		annotations.BandwidthGuaranteed: "true"}
	waitPolicy(t, "sextant-binding-annotations", func() error {
		return userKube.CoreV1().Pods(ns).Bind(ctx, binding(decisions), metav1.CreateOptions{DryRun: dryRun})
	})
	err = userKube.CoreV1().Pods(ns).Bind(ctx, binding(decisions), metav1.CreateOptions{DryRun: dryRun})
	wantDenied(t, err, "sextant-binding-annotations", "a user binds a pod with the ranker's decisions")
	// The API server copies a Binding's annotations onto the pod without pod admission:
	// a Binding must not bring what a pod write may not (a sidecar's command, a
	// bandwidth request), from anyone; the ranker's carries its three decisions only.
	for key, value := range map[string]string{sidecarKey: `["sh","-c","id"]`, annotations.BandwidthPrefix + "egress-required": "1G"} {
		err = userKube.CoreV1().Pods(ns).Bind(ctx, binding(map[string]string{key: value}), metav1.CreateOptions{DryRun: dryRun})
		wantDenied(t, err, "sextant-binding-annotations", "a user binds a pod with "+key)
	}
	rankerKube, _ := impersonate(t, rankerUser, nil)
	err = rankerKube.CoreV1().Pods(ns).Bind(ctx, binding(map[string]string{sidecarKey: `["sh"]`}), metav1.CreateOptions{DryRun: dryRun})
	wantDenied(t, err, "sextant-binding-annotations", "the ranker binds a pod with a sidecar's command")
	// Its labels are copied onto the pod too (Kubernetes 1.35 and later).
	labelled := binding(nil)
	labelled.Labels = map[string]string{annotations.SidecarPrepared: "true"}
	for who, kube := range map[string]kubernetes.Interface{"a user": userKube, "the ranker": rankerKube} {
		err = kube.CoreV1().Pods(ns).Bind(ctx, labelled, metav1.CreateOptions{DryRun: dryRun})
		wantDenied(t, err, "sextant-binding-annotations", who+" binds a pod with the label "+annotations.SidecarPrepared)
	}
	wantAllowed(t, rankerKube.CoreV1().Pods(ns).Bind(ctx, binding(decisions), metav1.CreateOptions{DryRun: dryRun}),
		"the ranker binds a pod with its decisions (dry run)")
	if err := pods.Bind(ctx, binding(decisions), metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind with the ranker's decisions as the admin: %v", err)
	}
	bound, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if bound.Spec.NodeName != node.Name || bound.Annotations[annotations.NUMANodes] != "0" || bound.Annotations[annotations.DevicesAllocated] == "" {
		t.Fatalf("after the Binding: node %q, annotations %v; want %s and the Binding's annotations", bound.Spec.NodeName, bound.Annotations, node.Name)
	}
	wantDenied(t, annotate(local.kube, `{"metadata":{"annotations":{"numa.sextant.io/nodes":"0,1"}}}`), "sextant-pod-annotations",
		"the admin changes numa.sextant.io/nodes of a bound pod")
	wantDenied(t, annotate(local.kube, `{"metadata":{"annotations":{"devices.sextant.io/allocated":null}}}`), "sextant-pod-annotations",
		"the admin removes devices.sextant.io/allocated from a bound pod")
	wantDenied(t, annotate(local.kube, `{"metadata":{"annotations":{"bandwidth.sextant.io/ingress-required":"1G"}}}`), "sextant-pod-annotations",
		"the admin changes the bandwidth of a bound pod")
	wantDenied(t, annotate(userKube, `{"metadata":{"annotations":{"bandwidth.sextant.io/egress-required":"1G"}}}`), "sextant-pod-annotations",
		"a user adds a bandwidth annotation to a bound pod")
	wantAllowed(t, annotate(userKube, `{"metadata":{"annotations":{"example.com/note":"x"}}}`),
		"a user adds an annotation of its own to a bound pod")

	// The accounts' rights.
	for _, c := range []struct {
		user, verb, resource, subresource string
		want                              bool
	}{
		{rankerUser, "patch", "pods", "", false},
		{rankerUser, "update", "pods", "", false},
		{rankerUser, "create", "pods", "binding", true},
		{rankerUser, "patch", "pods", "status", true}, // kube-scheduler's conditions and nominatedNodeName
		{webhookUser, "update", "pods", "", false},
		// The quota check reads the annotations of a namespace's pods (webhook.bandwidthQuota).
		{webhookUser, "list", "pods", "", true},
		{webhookUser, "watch", "pods", "", false},
		{webhookUser, "delete", "pods", "", false},
		{controllerUser, "update", "pods", "", true},
		{controllerUser, "patch", "pods", "", false},
		{agentUser, "patch", "pods", "", false},
		{agentUser, "patch", "nodes", "", false},
	} {
		if got := mayDo(t, c.user, c.verb, c.resource, c.subresource); got != c.want {
			t.Errorf("%s may %s %s: %v, want %v", c.user, c.verb, path.Join(c.resource, c.subresource), got, c.want)
		}
	}
}

// chartExitImage is the exit image the chart's virtual-node controller swaps sidecars to.
func chartExitImage(t *testing.T) string {
	t.Helper()
	d, err := local.kube.AppsV1().Deployments(releaseNamespace).Get(context.Background(), "sextant-virtual-node-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range d.Spec.Template.Spec.Containers[0].Args {
		if img, ok := strings.CutPrefix(arg, "--exit-image="); ok {
			return img
		}
	}
	t.Fatalf("the virtual-node controller has no --exit-image: %v", d.Spec.Template.Spec.Containers[0].Args)
	return ""
}

// grant gives user the rule in ns.
func grant(t *testing.T, ns, user string, rule rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if _, err := local.kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := local.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The RBAC authorizer reads bindings from an informer: until it has seen this one,
	// the user is refused by RBAC rather than by the policy a test means to show.
	attrs := authorizationv1.ResourceAttributes{Namespace: ns, Verb: rule.Verbs[0], Group: rule.APIGroups[0], Resource: rule.Resources[0]}
	eventually(t, 30*time.Second, func() (bool, string) {
		allowed, reason, err := accessReview(user, []string{"system:authenticated"}, attrs)
		return err == nil && allowed, fmt.Sprintf("the authorizer does not yet let %s %s %s in %s: %s %v", user, attrs.Verb, attrs.Resource, ns, reason, err)
	})
}

// accessReview asks the API server's authorizer whether user, in groups, may do what
// attrs name.
func accessReview(user string, groups []string, attrs authorizationv1.ResourceAttributes) (allowed bool, reason string, err error) {
	sar, err := local.kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("ask whether %s may %s %s: %w", user, attrs.Verb, attrs.Resource, err)
	}
	return sar.Status.Allowed, sar.Status.Reason, nil
}

// mayDoNamed asks the API server's authorizer whether a service account may do the verb
// on the named object (all of them with name ""), with the groups its token gives it.
func mayDoNamed(t *testing.T, user, namespace, group, resource, name, verb string) bool {
	t.Helper()
	return serviceAccountMay(t, user, authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group, Resource: resource, Name: name})
}

// mayDo asks the API server's authorizer whether a service account may do the verb
// on pods in some namespace (or on nodes), with the groups its token gives it.
func mayDo(t *testing.T, user, verb, resource, subresource string) bool {
	t.Helper()
	objectNamespace := "default"
	if resource == "nodes" {
		objectNamespace = ""
	}
	return serviceAccountMay(t, user, authorizationv1.ResourceAttributes{Namespace: objectNamespace, Verb: verb, Resource: resource, Subresource: subresource})
}

// serviceAccountMay is accessReview for a service account (system:serviceaccount:ns:name)
// with the groups its token gives it.
func serviceAccountMay(t *testing.T, user string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	ns := strings.Split(user, ":")[2]
	allowed, _, err := accessReview(user, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}, attrs)
	if err != nil {
		t.Fatal(err)
	}
	return allowed
}

// TestSecurityChartHardening: what the chart deployed runs confined. Every workload
// under the RuntimeDefault seccomp profile; the agent with containerd's socket directory
// read-only; the webhook with a token for its certificate only, reachable on its serving port
// only; the virtual-node controller in a Deployment of its own with its own account,
// holding the lease. That these workloads are Ready (deployChart waits for it) shows
// they work so: the agent loads and attaches eBPF under the profile and reaches
// containerd through the mounted directory.
func TestSecurityChartHardening(t *testing.T) {
	deployChart(t)
	ctx := context.Background()
	apps := local.kube.AppsV1()
	agent, err := apps.DaemonSets(releaseNamespace).Get(ctx, "sextant-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string]corev1.PodSpec{"DaemonSet sextant-agent": agent.Spec.Template.Spec}
	deployments := map[string]*appsv1.Deployment{}
	for _, name := range []string{"sextant-ranker", "sextant-webhook", "sextant-virtual-node-controller"} {
		d, err := apps.Deployments(releaseNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		deployments[name] = d
		specs["Deployment "+name] = d.Spec.Template.Spec
	}
	for what, spec := range specs {
		for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
			profile := spec.SecurityContext.SeccompProfile
			if c.SecurityContext != nil && c.SecurityContext.SeccompProfile != nil {
				profile = c.SecurityContext.SeccompProfile
			}
			if profile == nil || profile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s, container %s: seccomp profile %v, want RuntimeDefault", what, c.Name, profile)
			}
		}
	}

	// The agent: containerd's socket directory read-only (sidecar.criMount: directory),
	// where the socket containerd makes anew on a restart shows, and the agent's
	// --cri-endpoint inside it.
	var criDir string
	for _, v := range agent.Spec.Template.Spec.Volumes {
		if v.Name == "cri" && v.HostPath != nil && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathDirectory {
			criDir = v.HostPath.Path
		}
	}
	if criDir == "" {
		t.Fatalf("the agent mounts no containerd socket directory (volumes %v)", agent.Spec.Template.Spec.Volumes)
	}
	for _, c := range agent.Spec.Template.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name == "cri" && !m.ReadOnly {
				t.Errorf("container %s mounts containerd's socket directory %s writable", c.Name, criDir)
			}
		}
		for _, a := range c.Args {
			if endpoint, ok := strings.CutPrefix(a, "--cri-endpoint="); ok && !strings.HasPrefix(endpoint, "unix:///run/sextant/containerd/") {
				t.Errorf("container %s: %s, want a socket inside the mounted directory", c.Name, a)
			}
		}
	}

	// The webhook (builtin TLS): a token that may get and update its certificate's
	// Secret and the caBundle of its two webhook configurations, by name, and nothing
	// else; a NetworkPolicy that admits its serving and metrics ports and lets out only
	// connections to the API server's ports.
	web := deployments["sextant-webhook"].Spec.Template.Spec
	if web.ServiceAccountName != "sextant-webhook" || web.AutomountServiceAccountToken == nil || !*web.AutomountServiceAccountToken {
		t.Errorf("the webhook's pods: account %q, token mounted %v; want sextant-webhook with a token", web.ServiceAccountName, web.AutomountServiceAccountToken)
	}
	for _, c := range []struct {
		namespace, group, resource, name, verb string
		want                                   bool
	}{
		{releaseNamespace, "", "secrets", "sextant-webhook-cert", "update", true},
		{releaseNamespace, "", "secrets", "sextant-webhook-cert", "get", true},
		{releaseNamespace, "", "secrets", "sextant-webhook-cert", "delete", false},
		{releaseNamespace, "", "secrets", "other", "get", false},
		{releaseNamespace, "", "secrets", "", "list", false},
		{"", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "sextant-sidecar", "update", true},
		{"", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "sextant-annotations", "update", true},
		{"", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "other", "update", false},
		{"", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "create", false},
		{"default", "sextant.io", "bandwidthquotas", "", "list", true},
		{"default", "sextant.io", "bandwidthquotas", "q", "update", false},
	} {
		if got := mayDoNamed(t, webhookUser, c.namespace, c.group, c.resource, c.name, c.verb); got != c.want {
			t.Errorf("the webhook may %s %s %q: %v, want %v", c.verb, c.resource, c.name, got, c.want)
		}
	}
	// RBAC cannot narrow the update to the caBundle; the policy sextant-webhook-cabundle
	// does: the rules, selectors or endpoint of its webhooks stay as the chart made them.
	webhookKube, _ := impersonate(t, webhookUser, nil)
	mutating := func(change func(*admissionregistrationv1.MutatingWebhook)) error {
		cur, err := local.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "sextant-sidecar", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(&cur.Webhooks[0])
		_, err = webhookKube.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, cur, metav1.UpdateOptions{DryRun: dryRun})
		return err
	}
	everything := func(w *admissionregistrationv1.MutatingWebhook) {
		w.Rules = []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
		}}
	}
	waitPolicy(t, "sextant-webhook-cabundle", func() error { return mutating(everything) })
	wantDenied(t, mutating(func(w *admissionregistrationv1.MutatingWebhook) { w.NamespaceSelector = &metav1.LabelSelector{} }),
		"sextant-webhook-cabundle", "the webhook's account widens its webhook to every namespace")
	wantDenied(t, mutating(func(w *admissionregistrationv1.MutatingWebhook) { w.ClientConfig.Service.Path = ptr.To("/elsewhere") }),
		"sextant-webhook-cabundle", "the webhook's account points its webhook elsewhere")
	wantAllowed(t, mutating(func(w *admissionregistrationv1.MutatingWebhook) { w.ClientConfig.CABundle = []byte("e2e") }),
		"the webhook's account sets its webhook's caBundle (dry run)")
	np, err := local.kube.NetworkingV1().NetworkPolicies(releaseNamespace).Get(ctx, "sextant-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the webhook's NetworkPolicy: %v", err)
	}
	var in, out []int32
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			in = append(in, p.Port.IntVal)
		}
	}
	egressAnywhere := false
	for _, r := range np.Spec.Egress {
		if len(r.Ports) == 0 {
			egressAnywhere = true
		}
		for _, p := range r.Ports {
			out = append(out, p.Port.IntVal)
		}
	}
	var ports []int32
	for _, p := range web.Containers[0].Ports {
		ports = append(ports, p.ContainerPort)
	}
	if sel := np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"]; sel != "webhook" || len(np.Spec.PolicyTypes) != 2 ||
		!slices.Equal(in, ports) || egressAnywhere || !slices.Contains(out, 443) || len(out) > 3 {
		t.Errorf("the webhook's NetworkPolicy: %+v; want ingress to ports %v only, egress to the API server's ports only, for the webhook's pods", np.Spec, ports)
	}

	// The chart's priority classes: for its own pods only.
	classPod := func(namespace, class string) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "e2e-priority", Namespace: namespace},
			Spec: corev1.PodSpec{PriorityClassName: class, Containers: []corev1.Container{{Name: "main", Image: busyboxImage}}}}
		_, err := local.kube.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{DryRun: dryRun})
		return err
	}
	ns := testNamespace(t)
	waitPolicy(t, "sextant-priority-classes", func() error { return classPod(ns, "sextant-node-critical") })
	wantDenied(t, classPod(ns, "sextant-cluster-critical"), "sextant-priority-classes", "a pod outside the release's namespace names sextant-cluster-critical")
	wantAllowed(t, classPod(releaseNamespace, "sextant-node-critical"), "a pod in the release's namespace names sextant-node-critical (dry run)")
	wantAllowed(t, classPod(ns, ""), "a pod outside the release's namespace names no class (dry run)")

	// The virtual-node controller: its own account, and one replica leads.
	vnc := deployments["sextant-virtual-node-controller"]
	if vnc.Spec.Template.Spec.ServiceAccountName != "sextant-virtual-node-controller" {
		t.Errorf("the virtual-node controller runs as %q", vnc.Spec.Template.Spec.ServiceAccountName)
	}
	eventually(t, time.Minute, func() (bool, string) {
		holder, err := leaseHolder(ctx, "sextant-sidecar-controller")
		if err != nil || holder == "" {
			return false, fmt.Sprintf("no holder of the lease sextant-sidecar-controller (%v)", err)
		}
		return strings.HasPrefix(holder, "sextant-virtual-node-controller-"),
			fmt.Sprintf("the lease sextant-sidecar-controller is held by %q, not a virtual-node controller pod", holder)
	})
}

// TestSecurityNUMAPinnedPodsDoNotGrow: a pod bound with numa.sextant.io/nodes may shrink
// its CPU request in place (pods/resize), and not grow its CPU or memory requests; a pod
// without the annotation grows as the API server allows.
func TestSecurityNUMAPinnedPodsDoNotGrow(t *testing.T) {
	deployChart(t)
	ctx := context.Background()
	ns := testNamespace(t)
	// The API server checks a resize against the node's allocatable before any policy.
	node := readyFakeNode(t, "e2e-sec-resize-", nil, corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")})
	pods := local.kube.CoreV1().Pods(ns)
	create := func(name, scheduler string, nodeSelector map[string]string) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				SchedulerName: scheduler,
				NodeSelector:  nodeSelector,
				Containers: []corev1.Container{{Name: "main", Image: busyboxImage, ImagePullPolicy: corev1.PullNever,
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")},
					}}},
			},
		}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
	}
	bound := func(name string, ann map[string]string) {
		t.Helper()
		// No scheduler of that name: the test binds it.
		create(name, "sextant-e2e-nobody", nil)
		// As the admin, whom the Binding policy lets pass, in the ranker's place.
		if err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
			Target: corev1.ObjectReference{Kind: "Node", Name: node.Name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bound("pinned", map[string]string{annotations.NUMANodes: "0"})
	bound("plain", nil)
	resize := func(name, cpu, memory string, opts metav1.PatchOptions) error {
		body := fmt.Sprintf(`{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":%q,"memory":%q}}}]}}`, cpu, memory)
		_, err := pods.Patch(ctx, name, types.StrategicMergePatchType, []byte(body), opts, "resize")
		return err
	}
	waitPolicy(t, "sextant-numa-resize", func() error {
		return resize("pinned", "300m", "64Mi", metav1.PatchOptions{DryRun: dryRun})
	})
	wantDenied(t, resize("pinned", "300m", "64Mi", metav1.PatchOptions{}), "sextant-numa-resize", "a pinned pod grows its CPU request")
	wantDenied(t, resize("pinned", "200m", "128Mi", metav1.PatchOptions{}), "sextant-numa-resize", "a pinned pod grows its memory request")
	wantAllowed(t, resize("pinned", "100m", "64Mi", metav1.PatchOptions{}), "a pinned pod shrinks its CPU request")
	wantAllowed(t, resize("plain", "300m", "128Mi", metav1.PatchOptions{}), "a pod without NUMA nodes grows")

	// A pod waiting for the ranker (a node selector no node has keeps it waiting) may
	// already have NUMA nodes chosen at Reserve for the requests it has: they stay.
	create("pending", "sextant", map[string]string{"e2e.sextant.io/nowhere": "true"})
	create("pending-elsewhere", "sextant-e2e-nobody", nil)
	wantDenied(t, resize("pending", "300m", "64Mi", metav1.PatchOptions{}), "sextant-numa-resize", "a pod waiting for the ranker grows its CPU request")
	wantAllowed(t, resize("pending", "100m", "64Mi", metav1.PatchOptions{}), "a pod waiting for the ranker shrinks its CPU request")
	wantAllowed(t, resize("pending-elsewhere", "300m", "128Mi", metav1.PatchOptions{}), "a pod waiting for another scheduler grows")
}

// TestSecurityAgentPublishesOnlyItsNodesSlices: with the chart's DRA driver on
// (scripts/deploy.sh), the agent account with node A's claim publishes ResourceSlices of
// driver sextant.io for A, and none for node B, none of another driver, and none
// without the claim (sextant-agent-dra).
func TestSecurityAgentPublishesOnlyItsNodesSlices(t *testing.T) {
	deployChart(t)
	ctx := context.Background()
	a, b := fakeNode(t, "e2e-sec-dra-a-"), fakeNode(t, "e2e-sec-dra-b-")
	kubeA, _ := impersonate(t, agentUser, map[string][]string{nodeClaim: {a.Name}})
	kubeNoClaim, _ := impersonate(t, agentUser, nil)
	t.Cleanup(func() {
		_ = local.kube.ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.nodeName=" + a.Name})
	})
	slice := func(node, driver string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-"},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
				Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}},
		}
	}
	create := func(kube kubernetes.Interface, s *resourceapi.ResourceSlice, opts metav1.CreateOptions) (*resourceapi.ResourceSlice, error) {
		return kube.ResourceV1().ResourceSlices().Create(ctx, s, opts)
	}
	waitPolicy(t, "sextant-agent-dra", func() error {
		_, err := create(kubeA, slice(b.Name, "sextant.io"), metav1.CreateOptions{DryRun: dryRun})
		return err
	})
	_, err := create(kubeA, slice(b.Name, "sextant.io"), metav1.CreateOptions{})
	wantDenied(t, err, "sextant-agent-dra", "agent of A publishes a slice of B")
	_, err = create(kubeA, slice(a.Name, "gpu.example.com"), metav1.CreateOptions{})
	wantDenied(t, err, "sextant-agent-dra", "agent of A publishes a slice of another driver")
	_, err = create(kubeNoClaim, slice(a.Name, "sextant.io"), metav1.CreateOptions{})
	wantDenied(t, err, "sextant-agent-dra", "agent without a node claim publishes a slice of A")

	own, err := create(kubeA, slice(a.Name, "sextant.io"), metav1.CreateOptions{})
	wantAllowed(t, err, "agent of A publishes a slice of A")
	if err != nil {
		return
	}
	err = kubeNoClaim.ResourceV1().ResourceSlices().Delete(ctx, own.Name, metav1.DeleteOptions{})
	wantDenied(t, err, "sextant-agent-dra", "agent without a node claim deletes A's slice")
	err = kubeA.ResourceV1().ResourceSlices().Delete(ctx, own.Name, metav1.DeleteOptions{})
	wantAllowed(t, err, "agent of A deletes its own slice")
}
