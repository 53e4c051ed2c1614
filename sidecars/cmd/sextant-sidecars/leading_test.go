package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/sidecarrules"
	"sextant.io/sextant/sidecars/virtualnode"
	"sextant.io/sextant/sidecars/webhook"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(msg string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), `"msg":"`+msg+`"`)
}

const testExitImage = "sextant.local/exit0:test"

// finishedPod is a prepared pod on the virtual node vk whose main container exited 0:
// the controller swaps its sidecar as soon as it sees it.
func finishedPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{annotations.SidecarPrepared: "true"},
			Annotations: map[string]string{annotations.SidecarCommand("proxy"): `["sleep","3600"]`}},
		Spec: corev1.PodSpec{NodeName: "vk", RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: "proxy", Image: "busybox", Command: []string{webhook.WrapperPath},
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Env: []corev1.EnvVar{{Name: sidecarrules.EnvSidecar, Value: "true"}}}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "proxy", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}},
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLeadershipFlap: the replica leads and swaps; another identity takes the lease
// (as a replica whose clock or network made it the leader would); this replica stops
// its controller, campaigns, takes the lease back once the other stops renewing, and
// swaps again.
func TestLeadershipFlap(t *testing.T) {
	vk := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vk", Labels: map[string]string{virtualnode.NodeTypeLabel: virtualnode.NodeTypeVirtual}}}
	kube := fake.NewClientset(vk)
	withLeaseConflicts(kube)
	logs := &syncBuffer{}
	log := funcr.NewJSON(func(obj string) { _, _ = logs.Write([]byte(obj + "\n")) }, funcr.Options{})
	ctrl, err := virtualnode.New(virtualnode.Config{ExitImage: testExitImage}, kube, log)
	if err != nil {
		t.Fatal(err)
	}
	o := webhookOptions{leaderElect: true, leaseNamespace: "ns", leaseName: "lease",
		leaseDuration: 2 * time.Second, renewDeadline: time.Second, retryPeriod: 200 * time.Millisecond}
	elect, err := o.election(kube)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); runLeading(ctx, elect, ctrl, log) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("runLeading did not return after its context ended")
		}
	}()

	bg := context.Background()
	swapped := func(name string) bool {
		p, err := kube.CoreV1().Pods("ns").Get(bg, name, metav1.GetOptions{})
		return err == nil && p.Spec.InitContainers[0].Image == testExitImage
	}
	lease := func() *coordinationv1.Lease {
		l, err := kube.CoordinationV1().Leases("ns").Get(bg, "lease", metav1.GetOptions{})
		if err != nil {
			return &coordinationv1.Lease{}
		}
		return l
	}
	holder := func() string { return ptr.Deref(lease().Spec.HolderIdentity, "") }
	create := func(name string) {
		t.Helper()
		if _, err := kube.CoreV1().Pods("ns").Create(bg, finishedPod(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	waitFor(t, 10*time.Second, "this replica never took the lease", func() bool { return holder() == elect.Lock.Identity() })
	create("first")
	waitFor(t, 5*time.Second, "the leader did not swap the sidecar of pod first", func() bool { return swapped("first") })

	// The thief holds the lease, renewing it, for longer than the renew deadline.
	steal := func() {
		// The leader renews every 200 ms: a renewal between the read and the write is
		// a conflict, and the thief reads again.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l := lease()
			l.Spec.HolderIdentity = ptr.To("thief")
			l.Spec.LeaseDurationSeconds = ptr.To[int32](2)
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			// The elector compares the record it read with the one it wrote; a changed
			// transition count is part of a real takeover.
			l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
			_, err := kube.CoordinationV1().Leases("ns").Update(bg, l, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	steal()
	thiefDone := make(chan struct{})
	stopThief := make(chan struct{})
	go func() {
		defer close(thiefDone)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopThief:
				return
			case <-tick.C:
				l := lease()
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				_, _ = kube.CoordinationV1().Leases("ns").Update(bg, l, metav1.UpdateOptions{})
			}
		}
	}()
	waitFor(t, 10*time.Second, "this replica did not notice it lost the lease", func() bool {
		return logs.count("virtual-node controller stopped for the end of the term") >= 1 && logs.count("lost the lease; campaigning again") >= 1
	})
	create("second")
	time.Sleep(time.Second)
	if swapped("second") {
		t.Fatal("a replica that lost the lease still swaps sidecars")
	}
	if h := holder(); h != "thief" {
		t.Fatalf("the lease is held by %q while the thief renews it", h)
	}
	close(stopThief)
	<-thiefDone

	// The thief is gone: this replica takes the lease back and works again.
	waitFor(t, 10*time.Second, "this replica did not take the lease back", func() bool { return holder() == elect.Lock.Identity() })
	waitFor(t, 5*time.Second, "after taking the lease back, the controller did not swap the sidecar of pod second", func() bool { return swapped("second") })
	create("third")
	waitFor(t, 5*time.Second, "the controller did not swap the sidecar of pod third", func() bool { return swapped("third") })
	if n := logs.count("leading: virtual-node controller running"); n != 2 {
		t.Errorf("%d terms began, want 2", n)
	}
}

// withLeaseConflicts makes the fake's leases behave as the API server's: an update
// that carries a resourceVersion other than the stored one is refused with a conflict.
// Without it the fake takes every write, and a leader never learns another took over.
func withLeaseConflicts(kube *fake.Clientset) {
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	kube.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		cur, err := kube.Tracker().Get(gvr, l.Namespace, l.Name)
		if err != nil {
			return true, nil, err
		}
		rv := cur.(*coordinationv1.Lease).ResourceVersion
		if l.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, fmt.Errorf("resourceVersion %s, stored %s", l.ResourceVersion, rv))
		}
		n, _ := strconv.Atoi(rv)
		l.ResourceVersion = strconv.Itoa(n + 1)
		if err := kube.Tracker().Update(gvr, l, l.Namespace); err != nil {
			return true, nil, err
		}
		return true, l, nil
	})
	kube.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease)
		l.ResourceVersion = "1"
		return false, nil, nil
	})
}
