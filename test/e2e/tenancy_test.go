//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/annotations"
	sextantv1 "sextant.io/sextant/api/v1alpha1"
)

// tenant is an ordinary user with the edit role in a namespace of their own, as a
// shared cluster gives its tenants: they may create pods and read quotas there, and
// nothing else.
type tenant struct {
	ns, user string
	kube     kubernetes.Interface
	dyn      dynamic.Interface
}

func newTenant(t *testing.T) tenant {
	t.Helper()
	ctx := context.Background()
	ns := testNamespace(t)
	user := "tenant-" + ns
	if _, err := local.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kube, dyn := impersonate(t, user, nil)
	eventually(t, 30*time.Second, func() (bool, string) {
		_, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprintf("the authorizer does not yet let %s list pods in %s: %v", user, ns, err)
	})
	return tenant{ns: ns, user: user, kube: kube, dyn: dyn}
}

// demoPod is a pod for the chart's ranker on the local node, asking for bandwidth on the
// demo network (scripts/deploy.sh) with ann; it sleeps and stops at once when deleted.
func demoPod(name string, ann map[string]string) *corev1.Pod {
	all := map[string]string{annotations.BandwidthNetwork: "demo"}
	for k, v := range ann {
		all[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: all},
		Spec: corev1.PodSpec{
			SchedulerName:                 "sextant",
			NodeSelector:                  map[string]string{"sextant.io/local": "true"},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "app", Image: "sextant.local/busybox:dev", ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"},
			}},
		},
	}
}

// create makes the pod as the tenant, deleted at the end of the test.
func (tn tenant) create(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	pods := tn.kube.CoreV1().Pods(tn.ns)
	if _, err := pods.Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("tenant %s: create pod %s: %v", tn.user, pod.Name, err)
	}
	t.Cleanup(func() {
		_ = local.kube.CoreV1().Pods(tn.ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
}

// waitDemoNetwork waits for the chart's agent to report the demo network with at least
// min remaining each way, guarantees enforced: idle, as each test here starts it.
func waitDemoNetwork(t *testing.T, min int64) {
	t.Helper()
	eventually(t, 3*time.Minute, func() (bool, string) {
		nbw, err := getNodeBandwidth(context.Background(), local.nodeName)
		if err != nil {
			return false, err.Error()
		}
		for _, nw := range nbw.Status.Networks {
			if nw.Name != "demo" || nw.Ingress.Remaining == nil || nw.Egress.Remaining == nil {
				continue
			}
			in, eg := nw.Ingress.Remaining.Value(), nw.Egress.Remaining.Value()
			enforced := false
			for _, c := range nw.Conditions {
				enforced = enforced || c.Type == sextantv1.ConditionGuaranteesEnforced && c.Status == metav1.ConditionTrue
			}
			return in >= min && eg >= min && enforced && nbw.Status.Window != nil && nbw.Status.Window.Duration >= time.Minute,
				fmt.Sprintf("demo network: %d/%d remaining, enforced %v, window %v", in, eg, enforced, nbw.Status.Window)
		}
		return false, "no demo network in the node's NodeBandwidth"
	})
}

// waitEvent waits for an event of the pod with the reason and returns its message.
func waitEvent(t *testing.T, ns, pod, reason string, timeout time.Duration) string {
	t.Helper()
	var msg string
	eventually(t, timeout, func() (bool, string) {
		evs, err := local.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
		if err != nil || len(evs.Items) == 0 {
			return false, fmt.Sprintf("no %s event for %s/%s (%v); its events: %s", reason, ns, pod, err, podEvents(ns, pod))
		}
		msg = evs.Items[0].Message
		return true, ""
	})
	return msg
}

// A tenant's pod bound to the node that never starts (its init container sleeps
// forever), asking 1 bit/s required and 1P expected, first holds all the demo network
// has left, keeping another tenant's 10M pod off the node. At the chart's
// notStartedReduceAfter (2m) it holds only its required rate, with an Event, and the
// other pod is placed; at notStartedReleaseAfter (5m) it holds nothing, with an Event.
func TestTenancyPodThatNeverStartsGivesUpItsClaim(t *testing.T) {
	installCRDs(t)
	demoNetUp(t)
	deployChart(t)
	waitDemoNetwork(t, 150e6)
	squatter, victim := newTenant(t), newTenant(t)

	stuck := demoPod("stuck", map[string]string{annotations.IngressRequired: "1", annotations.IngressExpected: "1P"})
	stuck.Spec.InitContainers = []corev1.Container{{Name: "never-done", Image: "sextant.local/busybox:dev", ImagePullPolicy: corev1.PullNever,
		Command: []string{"sleep", "100000"}}}
	squatter.create(t, stuck)
	bound := waitScheduled(t, squatter.ns, "stuck", 2*time.Minute)
	boundAt := time.Now()
	for _, c := range bound.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			boundAt = c.LastTransitionTime.Time
		}
	}

	victim.create(t, demoPod("victim", map[string]string{annotations.IngressRequired: "10M"}))
	if msg := waitFailedScheduling(t, victim.ns, "victim", time.Minute); !strings.Contains(msg, "didn't have the pod's required ingress bandwidth remaining") {
		t.Fatalf("the 10M pod beside the never-starting one: FailedScheduling %q, want the ingress shortfall", msg)
	}
	placed := waitScheduled(t, victim.ns, "victim", 4*time.Minute)
	reduced := waitEvent(t, squatter.ns, "stuck", "BandwidthClaimReduced", time.Minute)
	for _, c := range placed.Status.Conditions {
		if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionTrue {
			continue
		}
		t.Logf("the 10M pod was placed %s after the never-starting pod was bound; the latter's Event: %s",
			c.LastTransitionTime.Sub(boundAt), reduced)
		// The times are whole seconds.
		if c.LastTransitionTime.Time.Before(boundAt.Add(2*time.Minute - time.Second)) {
			t.Errorf("the 10M pod was placed at %s, before the never-starting pod's first deadline (bound %s)", c.LastTransitionTime, boundAt)
		}
	}
	released := waitEvent(t, squatter.ns, "stuck", "BandwidthClaimReleased", 5*time.Minute)
	if !strings.Contains(released, `network "demo"`) || !strings.Contains(released, "until it starts") {
		t.Errorf("the release Event says %q, want the network and until when", released)
	}
}

// An operator caps a tenant's namespace with a BandwidthQuota; the tenant may read it,
// not change it. A pod that would take the namespace past it is refused at admission,
// naming the quota, and the ranker counts what the namespace holds into status.used.
func TestTenancyQuotaRefusesPodsPastIt(t *testing.T) {
	installCRDs(t)
	demoNetUp(t)
	deployChart(t)
	waitDemoNetwork(t, 100e6)
	tn := newTenant(t)
	ctx := context.Background()
	quotas := sextantv1.GroupVersion.WithResource("bandwidthquotas")
	q := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": sextantv1.GroupVersion.String(), "kind": "BandwidthQuota",
		"metadata": map[string]any{"name": "tenant-bandwidth", "namespace": tn.ns},
		"spec":     map[string]any{"hard": []any{map[string]any{"network": "demo", "ingress": "50M"}}},
	}}
	if _, err := local.dynamic.Resource(quotas).Namespace(tn.ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the BandwidthQuota: %v", err)
	}
	got, err := tn.dyn.Resource(quotas).Namespace(tn.ns).Get(ctx, "tenant-bandwidth", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the tenant cannot read its namespace's quota: %v", err)
	}
	unstructured.SetNestedSlice(got.Object, []any{map[string]any{"network": "demo", "ingress": "10G"}}, "spec", "hard")
	if _, err := tn.dyn.Resource(quotas).Namespace(tn.ns).Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the tenant raising its own quota: %v, want Forbidden", err)
	}

	tn.create(t, demoPod("first", map[string]string{annotations.IngressRequired: "30M"}))
	_, err = tn.kube.CoreV1().Pods(tn.ns).Create(ctx, demoPod("second", map[string]string{annotations.IngressRequired: "30M"}), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `exceeded BandwidthQuota "tenant-bandwidth"`) ||
		!strings.Contains(err.Error(), "60M (30M used + 30M this pod)") {
		t.Fatalf("a pod past the quota: %v, want Forbidden naming the quota and the figures", err)
	}
	// A pod asking within what is left is admitted.
	tn.create(t, demoPod("third", map[string]string{annotations.IngressRequired: "20M"}))
	waitScheduled(t, tn.ns, "first", 2*time.Minute)
	waitScheduled(t, tn.ns, "third", 2*time.Minute)
	eventually(t, time.Minute, func() (bool, string) {
		got, err := local.dynamic.Resource(quotas).Namespace(tn.ns).Get(ctx, "tenant-bandwidth", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		used, _, _ := unstructured.NestedSlice(got.Object, "status", "used")
		return len(used) == 1 && fmt.Sprint(used[0].(map[string]any)["ingress"]) == "50M", fmt.Sprintf("status.used %v, want demo ingress 50M", used)
	})
}

// A tenant's pod of higher priority that fits on the node only without a lower-priority
// pod's bandwidth (its reservation and its guarantee on the demo network, which the
// agent enforces) preempts it, through kube-scheduler's preemption, and runs.
func TestTenancyHigherPriorityBandwidthPodPreempts(t *testing.T) {
	installCRDs(t)
	demoNetUp(t)
	deployChart(t)
	waitDemoNetwork(t, 150e6)
	ctx := context.Background()
	for name, value := range map[string]int32{"e2e-bandwidth-low": 100, "e2e-bandwidth-high": 1000} {
		if _, err := local.kube.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = local.kube.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	lowTenant, highTenant := newTenant(t), newTenant(t)
	low := demoPod("low", map[string]string{annotations.IngressRequired: "150M"})
	low.Spec.PriorityClassName = "e2e-bandwidth-low"
	lowTenant.create(t, low)
	waitScheduled(t, lowTenant.ns, "low", 2*time.Minute)
	eventually(t, 2*time.Minute, func() (bool, string) {
		p, err := local.kube.CoreV1().Pods(lowTenant.ns).Get(ctx, "low", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("the low-priority pod is not running: %v", err)
	})

	high := demoPod("high", map[string]string{annotations.IngressRequired: "100M"})
	high.Spec.PriorityClassName = "e2e-bandwidth-high"
	highTenant.create(t, high)
	msg := waitEvent(t, lowTenant.ns, "low", "Preempted", 2*time.Minute)
	placed := waitScheduled(t, highTenant.ns, "high", 2*time.Minute)
	if !strings.Contains(msg, string(placed.UID)) {
		t.Errorf("the low-priority pod's Preempted event %q does not name the preemptor %s", msg, placed.UID)
	}
	if placed.Spec.NodeName != local.nodeName {
		t.Errorf("the preemptor was bound to %s, want %s", placed.Spec.NodeName, local.nodeName)
	}
	if got := placed.Annotations[annotations.BandwidthGuaranteed]; got != "true" {
		t.Errorf("the preemptor's %s = %q, want true (the demo network enforces)", annotations.BandwidthGuaranteed, got)
	}
}

// Another scheduler's DaemonSet asking 1P required, whose container exits and is
// restarted in a loop, does not keep a tenant's 10M pod off the node: another
// scheduler's pod reserves only while it runs, and no more than the node had left.
func TestTenancyForeignDaemonSetDoesNotBlock(t *testing.T) {
	installCRDs(t)
	demoNetUp(t)
	deployChart(t)
	waitDemoNetwork(t, 100e6)
	ctx := context.Background()
	squatter, victim := newTenant(t), newTenant(t)
	labels := map[string]string{"app": "loop"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "loop"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					annotations.BandwidthNetwork: "demo", annotations.IngressRequired: "1P"}},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"sextant.io/local": "true"},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{Name: "loop", Image: "sextant.local/busybox:dev", ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", "sleep 5; exit 1"}}},
				},
			},
		},
	}
	if _, err := squatter.kube.AppsV1().DaemonSets(squatter.ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatalf("tenant %s: create DaemonSet: %v", squatter.user, err)
	}
	eventually(t, 3*time.Minute, func() (bool, string) {
		pods, err := local.kube.CoreV1().Pods(squatter.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=loop"})
		if err != nil || len(pods.Items) != 1 || len(pods.Items[0].Status.ContainerStatuses) == 0 {
			return false, fmt.Sprintf("the DaemonSet's pod: %v", err)
		}
		p := pods.Items[0]
		return p.Spec.SchedulerName == corev1.DefaultSchedulerName && p.Status.ContainerStatuses[0].RestartCount >= 2,
			fmt.Sprintf("the DaemonSet's pod (scheduler %s) restarted %d times", p.Spec.SchedulerName, p.Status.ContainerStatuses[0].RestartCount)
	})
	victim.create(t, demoPod("victim", map[string]string{annotations.IngressRequired: "10M"}))
	placed := waitScheduled(t, victim.ns, "victim", 3*time.Minute)
	if placed.Spec.NodeName != local.nodeName {
		t.Errorf("the 10M pod was bound to %s, want %s", placed.Spec.NodeName, local.nodeName)
	}
}
