package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/agent/bandwidth"
)

// The agent gives its node's interfaces back as it stops only when it is being removed:
// its DaemonSet gone, made again, or being deleted, or its account no longer allowed (an
// uninstall deletes the RBAC right after the DaemonSet). A rolling update keeps them.
func TestAgentRemoved(t *testing.T) {
	t.Setenv("POD_NAME", "sextant-agent-x1")
	t.Setenv("POD_NAMESPACE", "sextant-system")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sextant-agent-x1", Namespace: "sextant-system",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "sextant-agent", UID: "ds-1", Controller: ptr.To(true)}}}}
	ds := func(uid string, deleting bool) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "sextant-agent", Namespace: "sextant-system", UID: types.UID(uid)}}
		if deleting {
			now := metav1.Now()
			d.DeletionTimestamp = &now
			d.Finalizers = []string{"foregroundDeletion"}
		}
		return d
	}
	forbidden := func(resource string) func(k8stesting.Action) (bool, runtime.Object, error) {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "x", errors.New("RBAC: role not found"))
		}
	}
	for _, c := range []struct {
		name    string
		objects []runtime.Object
		react   map[string]func(k8stesting.Action) (bool, runtime.Object, error)
		want    bool
		wantErr bool
	}{
		{name: "a rolling update", objects: []runtime.Object{pod, ds("ds-1", false)}, want: false},
		{name: "the DaemonSet gone", objects: []runtime.Object{pod}, want: true},
		{name: "the DaemonSet made again", objects: []runtime.Object{pod, ds("ds-2", false)}, want: true},
		{name: "the DaemonSet being deleted", objects: []runtime.Object{pod, ds("ds-1", true)}, want: true},
		{name: "the agent's role gone", objects: []runtime.Object{pod, ds("ds-1", false)},
			react: map[string]func(k8stesting.Action) (bool, runtime.Object, error){"pods": forbidden("pods")}, want: true},
		{name: "the API server away", objects: []runtime.Object{pod, ds("ds-1", false)},
			react: map[string]func(k8stesting.Action) (bool, runtime.Object, error){"daemonsets": func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewServiceUnavailable("shutting down")
			}}, want: false, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			kube := fake.NewClientset(c.objects...)
			for resource, r := range c.react {
				kube.PrependReactor("get", resource, r)
			}
			removed, why, err := agentRemoved(context.Background(), kube)
			if removed != c.want || (err != nil) != c.wantErr {
				t.Fatalf("agentRemoved = %v (%q), %v; want %v, error %v", removed, why, err, c.want, c.wantErr)
			}
			if removed && why == "" {
				t.Error("removed without saying why")
			}
		})
	}
	t.Run("outside a pod", func(t *testing.T) {
		t.Setenv("POD_NAME", "")
		if removed, _, err := agentRemoved(context.Background(), fake.NewClientset()); removed || err != nil {
			t.Errorf("agentRemoved = %v, %v; want false: a process outside a pod is never uninstalled", removed, err)
		}
	})
}

func TestEnforcementFlags(t *testing.T) {
	storage := []bandwidth.NetworkSpec{{Name: "storage"}}
	ok := enforcementOptions{networks: []string{"pod", "storage"}, shapedShare: 0.95, unreservedShare: 0.05, stateDir: "/var/lib/x", resync: 1, onExit: onExitAuto}
	if err := ok.validate(storage, true); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		mut        func(*enforcementOptions)
		heartbeats bool
		want       string
	}{
		{"unknown network", func(o *enforcementOptions) { o.networks = []string{"backup"} }, true, `--enforce "backup": not a network of the node`},
		{"without heartbeats", func(*enforcementOptions) {}, false, "--enforce needs --heartbeats"},
		{"shaped share above 1", func(o *enforcementOptions) { o.shapedShare = 1.5 }, true, "--enforcement-shaped-share"},
		{"unreserved share 0", func(o *enforcementOptions) { o.unreservedShare = 0 }, true, "--enforcement-unreserved-share"},
		{"no state dir", func(o *enforcementOptions) { o.stateDir = "" }, true, "--state-dir is empty"},
		{"on-exit typo", func(o *enforcementOptions) { o.onExit = "forget" }, true, `--enforcement-on-exit "forget": want auto, keep or restore`},
	} {
		o := ok
		c.mut(&o)
		err := o.validate(storage, c.heartbeats)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
