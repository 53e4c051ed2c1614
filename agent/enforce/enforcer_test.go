//go:build linux

package enforce

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"sextant.io/sextant/agent/bandwidth"
	"sextant.io/sextant/agent/nodepods"
	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/internal/netnstest"
)

func runningPod(name, ip string, bound time.Time, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(bound)}}},
	}
}

// runEnforcer runs an enforcer of node-a's pod network, which is up0 at 1 Gbit/s each
// way, until the test ends or stop is called.
func runEnforcer(t *testing.T, s *Shaper, kube *fake.Clientset, reg prometheus.Registerer) (e *Enforcer, stop func()) {
	t.Helper()
	up0 := ifindexIn(t, s, "up0")
	capacity := 1e9
	snap := bandwidth.Snapshot{
		Time:       t0,
		Interfaces: []bandwidth.InterfaceSample{{Name: "up0", Index: up0, Up: true, Ingress: bandwidth.DirectionSample{Capacity: &capacity}, Egress: bandwidth.DirectionSample{Capacity: &capacity}}},
		Networks:   []bandwidth.NetworkSample{{Name: "pod", Interfaces: []string{"up0"}}},
	}
	pods := nodepods.NewInformer(kube, "node-a")
	e, err := New(Config{NodeName: "node-a", Networks: []string{"pod"}, Resync: time.Hour, SampleInterval: 100 * time.Millisecond},
		kube, pods, func() bandwidth.Snapshot { return snap }, s, reg, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go pods.Run(ctx.Done())
	go func() { defer close(done); _ = e.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return e, stop
}

// The enforcer follows the node's pods: classes come with a pod and go with it, the pod
// the network cannot also guarantee gets an Event, and the status says what holds.
func TestEnforcerFollowsPods(t *testing.T) {
	_, path := shaperNetns(t)
	stateDir := t.TempDir()
	s := newShaper(t, path, stateDir)
	h := netnstest.Handle(t, path)
	up0 := ifindexIn(t, s, "up0")
	kube := fake.NewClientset(
		runningPod("guaranteed", "10.0.0.1", t0, map[string]string{annotations.EgressRequired: "600M"}),
		runningPod("capped", "10.0.0.2", t0.Add(time.Second), map[string]string{annotations.KubernetesIngressBandwidth: "100M"}),
		runningPod("late", "10.0.0.3", t0.Add(2*time.Second), map[string]string{annotations.EgressRequired: "400M"}),
	)
	reg := prometheus.NewPedanticRegistry()
	e, stop := runEnforcer(t, s, kube, reg)

	// What the enforcer saved, read from its file: the enforcer owns the state in memory.
	minors := func() map[types.UID]uint16 {
		st, err := LoadState(stateDir)
		if err != nil {
			t.Fatal(err)
		}
		return st.Minors
	}
	minorOf := func(name string) uint16 { return minors()[types.UID("uid-"+name)] }
	waitFor(t, "the guaranteed and the capped pod classified, the late one short", func() (bool, string) {
		eg, in := classRates(t, h, up0), classRatesIFB(t, h, up0)
		g, c := minorOf("guaranteed"), minorOf("capped")
		ok := g != 0 && c != 0 && eg[g] == [2]uint64{600e6, 950e6} && in[c] == [2]uint64{minClassRate, 100e6} && len(eg) == 3 && len(in) == 3
		return ok, fmt.Sprintf("egress %v, ingress %v, minors %v", eg, in, minors())
	})
	// The status is set after the kernel and the file (and the late pod's Event): wait
	// for it too.
	waitFor(t, "the status of the shaped network", func() (bool, string) {
		st := e.Status()
		ok := len(st) == 1 && st[0].Enforced && st[0].Reason == v1alpha1.ReasonShaped && st[0].Guaranteed[Egress] == 600e6 && st[0].Shortfalls[Egress] == 1
		return ok, fmt.Sprintf("status %+v, want pod enforced with 600M guaranteed egress and one shortfall", st)
	})
	addrs, err := s.classifier.Addresses()
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 2 || addrs[netip.MustParseAddr("10.0.0.1")] != classID(minorOf("guaranteed")) || addrs[netip.MustParseAddr("10.0.0.2")] != classID(minorOf("capped")) {
		t.Errorf("classifier addresses %v", addrs)
	}
	waitFor(t, "the late pod's Event", func() (bool, string) {
		evs, _ := kube.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		for _, ev := range evs.Items {
			if ev.Reason == "BandwidthNotGuaranteed" && ev.InvolvedObject.Name == "late" && ev.Type == corev1.EventTypeWarning &&
				strings.Contains(ev.Message, "egress-required 400M is not guaranteed") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none BandwidthNotGuaranteed for late", len(evs.Items))
	})
	if n := testutil.CollectAndCount(reg, "sextant_enforcement_shortfall_pods"); n != 2 {
		t.Errorf("%d shortfall series, want one per direction", n)
	}

	// The guaranteed pod ends: its class and address go, and the late pod's guarantee fits.
	if err := kube.CoreV1().Pods("ns").Delete(context.Background(), "guaranteed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the late pod guaranteed once the first is gone", func() (bool, string) {
		eg := classRates(t, h, up0)
		l := minorOf("late")
		addrs, _ := s.classifier.Addresses()
		_, stale := addrs[netip.MustParseAddr("10.0.0.1")]
		return l != 0 && eg[l] == [2]uint64{400e6, 950e6} && len(eg) == 3 && !stale && minorOf("guaranteed") == 0,
			fmt.Sprintf("egress %v, addresses %v, minors %v", eg, addrs, minors())
	})
	stop()
	if err := e.Teardown(); err != nil {
		t.Fatal(err)
	}
	if got := classRates(t, h, up0); len(got) != 0 {
		t.Errorf("classes left after teardown: %v", got)
	}
}

func classRatesIFB(t *testing.T, h *netlink.Handle, ifindex int) map[uint16][2]uint64 {
	t.Helper()
	l, err := h.LinkByName(IFBName(ifindex))
	if err != nil {
		return nil
	}
	return classRates(t, h, l.Attrs().Index)
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		var ok bool
		ok, last = cond()
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %s", what, last)
	}
}

// An interface the agent may not shape (another tool's classful root) leaves the network
// not enforced: the status says why, an Event on the node says so once, the interface
// keeps what it had, and the rest of the agent carries on.
func TestEnforcerReportsWhyItCannotShape(t *testing.T) {
	ns, path := shaperNetns(t, "handle", "1:", "htb", "default", "10")
	netnstest.Run(t, "tc", "-n", ns, "class", "add", "dev", "up0", "parent", "1:", "classid", "1:10", "htb", "rate", "100mbit")
	s := newShaper(t, path, t.TempDir())
	kube := fake.NewClientset(runningPod("guaranteed", "10.0.0.1", t0, map[string]string{annotations.EgressRequired: "100M"}))
	e, _ := runEnforcer(t, s, kube, nil)

	waitFor(t, "the status to say the network is not enforced", func() (bool, string) {
		st := e.Status()
		return len(st) == 1 && !st[0].Enforced && st[0].Reason == v1alpha1.ReasonShapingFailed &&
			strings.Contains(st[0].Message, "another tool's classful shaping"), fmt.Sprintf("status %+v", st)
	})
	waitFor(t, "one Event on the node", func() (bool, string) {
		evs, _ := kube.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		n := 0
		for _, ev := range evs.Items {
			if ev.Reason == "BandwidthEnforcementFailed" && ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == "node-a" {
				n++
			}
		}
		return n == 1, fmt.Sprintf("%d BandwidthEnforcementFailed events on the node among %d", n, len(evs.Items))
	})
	// The sample ticks retry it: still one Event, and the foreign root untouched.
	time.Sleep(500 * time.Millisecond)
	evs, _ := kube.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if len(evs.Items) != 1 {
		t.Errorf("%d events after the retries, want still 1", len(evs.Items))
	}
	if got := shapingRoot(t, path); got != "htb 1:" {
		t.Errorf("root %q, want the foreign htb 1: untouched", got)
	}
}

// shapingRoot is up0's root qdisc as "kind handle:".
func shapingRoot(t *testing.T, path string) string {
	t.Helper()
	h := netnstest.Handle(t, path)
	l, err := h.LinkByName("up0")
	if err != nil {
		t.Fatal(err)
	}
	qs, err := h.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			major, _ := netlink.MajorMinor(q.Attrs().Handle)
			return fmt.Sprintf("%s %x:", q.Type(), major)
		}
	}
	return ""
}
