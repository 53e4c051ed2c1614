package report

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/agent/bandwidth"
	"sextant.io/sextant/api/v1alpha1"
)

func snapshot(at time.Time, ifaces ...bandwidth.InterfaceSample) bandwidth.Snapshot {
	return bandwidth.Snapshot{Time: at, Window: time.Minute, FullWindow: time.Minute, Interfaces: ifaces}
}

// dir is a direction with capacity c and peak p (bits/s); c < 0 means unknown.
func dir(c, rate, p float64) bandwidth.DirectionSample {
	d := bandwidth.DirectionSample{Rate: rate, Peak: p}
	if c >= 0 {
		d.Capacity = ptr.To(c)
		d.Remaining = ptr.To(max(c-p, 0))
	}
	return d
}

func TestBandwidthStatus(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 400e6, time.UTC)
	snap := snapshot(at,
		bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(10e9, 1.2e9, 2e9), Egress: dir(10e9, 300e6, 900e6)},
		bandwidth.InterfaceSample{Name: "eth1", Ingress: dir(1e9, 100e6, 1.5e9), Egress: dir(-1, 5e6, 7e6)},
		bandwidth.InterfaceSample{Name: "veth0", Ingress: dir(-1, 1234567, 2345678), Egress: dir(-1, 0, 0)},
	)
	got := BandwidthStatus(snap, "v0.1.0")
	if got.SampleTime.Time != at.Truncate(time.Second) || got.Window.Duration != time.Minute || got.AgentVersion != "v0.1.0" {
		t.Errorf("metadata = %v %v %q", got.SampleTime, got.Window, got.AgentVersion)
	}
	checks := []struct {
		name string
		d    v1alpha1.DirectionBandwidth
		want [4]string // capacity, rate, peak, remaining
	}{
		{"eth0 ingress", got.Interfaces[0].Ingress, [4]string{"10G", "1200M", "2G", "8G"}},
		{"eth0 egress", got.Interfaces[0].Egress, [4]string{"10G", "300M", "900M", "9100M"}},
		// A peak above capacity floors remaining at zero.
		{"eth1 ingress", got.Interfaces[1].Ingress, [4]string{"1G", "100M", "1500M", "0"}},
		{"eth1 egress, unknown capacity", got.Interfaces[1].Egress, [4]string{"", "5M", "7M", ""}},
		// Rounded to whole kbit/s.
		{"veth0 ingress", got.Interfaces[2].Ingress, [4]string{"", "1235k", "2346k", ""}},
		// Totals: only directions with known capacity; remaining is the sum of remainings.
		{"total ingress", got.Total.Ingress, [4]string{"11G", "1300M", "3500M", "8G"}},
		{"total egress", got.Total.Egress, [4]string{"10G", "300M", "900M", "9100M"}},
	}
	for _, c := range checks {
		got := [4]string{qstr(c.d.Capacity), qstr(c.d.Rate), qstr(c.d.Peak), qstr(c.d.Remaining)}
		for i, field := range []string{"capacity", "rate", "peak", "remaining"} {
			if g := got[i]; g != c.want[i] {
				t.Errorf("%s %s = %q, want %q", c.name, field, g, c.want[i])
			}
		}
	}

	none := BandwidthStatus(snapshot(at, bandwidth.InterfaceSample{Name: "veth0", Ingress: dir(-1, 1, 1), Egress: dir(-1, 1, 1)}), "")
	if none.Total != nil {
		t.Errorf("total with no known capacity = %+v, want absent", none.Total)
	}
}

// TestBandwidthStatusNetworks: a network sums its interfaces' capacity, rate and peak,
// and its remaining is the largest of any one interface: two separate 10G NICs with 8G
// and 6G left never admit a pod that requires more than 8G; a bond is one interface.
func TestBandwidthStatusNetworks(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	snap := snapshot(at,
		bandwidth.InterfaceSample{Name: "bond0", Ingress: dir(20e9, 1e9, 2e9), Egress: dir(20e9, 0, 5e9)},
		bandwidth.InterfaceSample{Name: "eth3", Ingress: dir(10e9, 1e9, 2e9), Egress: dir(10e9, 1e9, 1e9)},
		bandwidth.InterfaceSample{Name: "eth4", Ingress: dir(10e9, 3e9, 4e9), Egress: dir(-1, 1e6, 2e6)},
		bandwidth.InterfaceSample{Name: "ib0", Ingress: dir(-1, 7e6, 8e6), Egress: dir(-1, 0, 0)},
	)
	snap.Networks = []bandwidth.NetworkSample{
		{Name: "pod", Interfaces: []string{"bond0"}},
		{Name: "storage", Interfaces: []string{"eth3", "eth4"}},
		{Name: "fabric", Interfaces: []string{"ib0"}},
		// Its interface attached but not sampled yet: published as unmeasured.
		{Name: "backup", Interfaces: []string{"eth9"}},
	}
	got := BandwidthStatus(snap, "")
	if len(got.Networks) != 4 {
		t.Fatalf("networks %+v, want pod, storage, fabric and backup", got.Networks)
	}
	if b := got.Networks[3]; b.Name != "backup" || b.Interfaces == nil || len(b.Interfaces) != 0 || b.Ingress != (v1alpha1.DirectionBandwidth{}) || b.Egress != (v1alpha1.DirectionBandwidth{}) {
		t.Errorf("backup network %+v, want no interfaces and nothing known", b)
	}
	checks := []struct {
		name string
		n    v1alpha1.NetworkBandwidth
		d    v1alpha1.DirectionBandwidth
		want [4]string // capacity, rate, peak, remaining
	}{
		{"pod ingress", got.Networks[0], got.Networks[0].Ingress, [4]string{"20G", "1G", "2G", "18G"}},
		{"storage ingress", got.Networks[1], got.Networks[1].Ingress, [4]string{"20G", "4G", "6G", "8G"}},
		{"storage egress, one NIC of unknown capacity", got.Networks[1], got.Networks[1].Egress, [4]string{"10G", "1001M", "1002M", "9G"}},
		{"fabric ingress, no known capacity", got.Networks[2], got.Networks[2].Ingress, [4]string{"", "7M", "8M", ""}},
	}
	for _, c := range checks {
		got := [4]string{qstr(c.d.Capacity), qstr(c.d.Rate), qstr(c.d.Peak), qstr(c.d.Remaining)}
		for i, field := range []string{"capacity", "rate", "peak", "remaining"} {
			if g := got[i]; g != c.want[i] {
				t.Errorf("%s %s = %q, want %q", c.name, field, g, c.want[i])
			}
		}
	}
	if !slices.Equal(got.Networks[1].Interfaces, []string{"eth3", "eth4"}) || got.Networks[0].Name != "pod" {
		t.Errorf("networks %+v", got.Networks)
	}

	// A change of membership is written at once.
	cfg := BandwidthConfig{}.withDefaults()
	moved := snap
	moved.Networks = []bandwidth.NetworkSample{{Name: "pod", Interfaces: []string{"bond0"}}, {Name: "storage", Interfaces: []string{"eth3"}}}
	next := BandwidthStatus(moved, "")
	if !bandwidthDue(cfg, &got, at, &next, at.Add(3*time.Second)) {
		t.Error("a network that lost an interface is not written")
	}
	same := BandwidthStatus(snap, "")
	if bandwidthDue(cfg, &got, at, &same, at.Add(3*time.Second)) {
		t.Error("an unchanged report is written before max-interval")
	}
}

// TestBandwidthStatusPodNetworkUnmeasured: a current agent whose pod network has no
// sample yet still publishes it, unmeasured; without it the ranker would read the report
// as an agent's older than networks and take the sum over every NIC for the pod network.
func TestBandwidthStatusPodNetworkUnmeasured(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name     string
		networks []bandwidth.NetworkSample
	}{
		{"pod interface not sampled", []bandwidth.NetworkSample{{Name: "pod", Interfaces: []string{"eth0"}}, {Name: "storage", Interfaces: []string{"eth2", "eth3"}}}},
		{"no pod interface found", []bandwidth.NetworkSample{{Name: "storage", Interfaces: []string{"eth2", "eth3"}}}},
		{"no network sampled", []bandwidth.NetworkSample{{Name: "pod", Interfaces: []string{"eth0"}}}},
		{"no network at all", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			snap := snapshot(at,
				bandwidth.InterfaceSample{Name: "eth2", Ingress: dir(10e9, 0, 0), Egress: dir(10e9, 0, 0)},
				bandwidth.InterfaceSample{Name: "eth3", Ingress: dir(10e9, 0, 0), Egress: dir(10e9, 0, 0)},
			)
			snap.Networks = c.networks
			got := BandwidthStatus(snap, "")
			i := slices.IndexFunc(got.Networks, func(n v1alpha1.NetworkBandwidth) bool { return n.Name == "pod" })
			if i < 0 {
				t.Fatalf("networks %+v, want the pod network among them", got.Networks)
			}
			if pod := got.Networks[i]; pod.Ingress.Remaining != nil || pod.Egress.Remaining != nil || len(pod.Interfaces) != 0 {
				t.Errorf("pod network %+v, want no interfaces and no remaining bandwidth", pod)
			}
			if got.Total == nil || qstr(got.Total.Ingress.Remaining) != "20G" {
				t.Errorf("total %+v, want the sum of eth2 and eth3 for people to read", got.Total)
			}
		})
	}
}

// TestBandwidthStatusWithinTheCRD: a node with more interfaces and networks than the
// CRD's lists take (an SR-IOV node's virtual functions) publishes a status the API
// server accepts, with the pod network and every interface's figures.
func TestBandwidthStatusWithinTheCRD(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var ifaces []bandwidth.InterfaceSample
	var vfs []string
	for i := range 300 {
		name := fmt.Sprintf("ens1f0v%d", i)
		ifaces = append(ifaces, bandwidth.InterfaceSample{Name: name, Ingress: dir(1e9, 0, 0), Egress: dir(1e9, 0, 0)})
		vfs = append(vfs, name)
	}
	snap := snapshot(at, ifaces...)
	snap.Networks = []bandwidth.NetworkSample{{Name: "sriov", Interfaces: vfs}}
	for i := range 40 {
		snap.Networks = append(snap.Networks, bandwidth.NetworkSample{Name: fmt.Sprintf("n%d", i), Interfaces: []string{"eth9"}})
	}
	got := BandwidthStatus(snap, "")
	if n := len(got.Interfaces); n > v1alpha1.MaxInterfaces {
		t.Errorf("%d interfaces, the CRD takes %d", n, v1alpha1.MaxInterfaces)
	}
	if n := len(got.Networks); n > v1alpha1.MaxNetworks {
		t.Errorf("%d networks, the CRD takes %d", n, v1alpha1.MaxNetworks)
	}
	if !slices.ContainsFunc(got.Networks, func(n v1alpha1.NetworkBandwidth) bool { return n.Name == "pod" }) {
		t.Error("the pod network was trimmed")
	}
	sriov := got.Networks[0]
	if n := len(sriov.Interfaces); sriov.Name != "sriov" || n > v1alpha1.MaxNetworkInterfaces {
		t.Errorf("network %s lists %d interfaces, the CRD takes %d", sriov.Name, n, v1alpha1.MaxNetworkInterfaces)
	}
	if c := qstr(sriov.Ingress.Capacity); c != "300G" {
		t.Errorf("sriov capacity %s, want 300G: every interface counts", c)
	}
	if c := qstr(got.Total.Ingress.Capacity); c != "300G" {
		t.Errorf("total capacity %s, want 300G", c)
	}
}

func qstr(q *resource.Quantity) string {
	if q == nil {
		return ""
	}
	return q.String()
}

func TestBandwidthDue(t *testing.T) {
	cfg := BandwidthConfig{}.withDefaults() // 5%, 2s, 30s
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	base := BandwidthStatus(snapshot(t0, bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(10e9, 0, 2e9), Egress: dir(10e9, 0, 1e9)}), "")
	with := func(ifaces ...bandwidth.InterfaceSample) *v1alpha1.NodeBandwidthStatus {
		s := BandwidthStatus(snapshot(t0, ifaces...), "")
		return &s
	}
	cases := []struct {
		name    string
		last    *v1alpha1.NodeBandwidthStatus
		elapsed time.Duration
		next    *v1alpha1.NodeBandwidthStatus
		want    bool
	}{
		{"first sample", nil, 0, &base, true},
		{"unchanged", &base, 5 * time.Second, &base, false},
		{"unchanged at max interval", &base, 30 * time.Second, &base, true},
		{"remaining moved 4% of capacity", &base, 5 * time.Second,
			with(bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(10e9, 0, 2.4e9), Egress: dir(10e9, 0, 1e9)}), false},
		{"remaining moved 6% of capacity", &base, 5 * time.Second,
			with(bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(10e9, 0, 2.6e9), Egress: dir(10e9, 0, 1e9)}), true},
		{"egress moved 6% down", &base, 5 * time.Second,
			with(bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(10e9, 0, 2e9), Egress: dir(10e9, 0, 0.4e9)}), true},
		{"big move within min interval", &base, time.Second,
			with(bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(10e9, 0, 9e9), Egress: dir(10e9, 0, 1e9)}), false},
		{"interface appeared", &base, 3 * time.Second,
			with(bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(10e9, 0, 2e9), Egress: dir(10e9, 0, 1e9)},
				bandwidth.InterfaceSample{Name: "eth1", Ingress: dir(-1, 0, 0), Egress: dir(-1, 0, 0)}), true},
		{"interface renamed", &base, 3 * time.Second,
			with(bandwidth.InterfaceSample{Name: "eth9", Ingress: dir(10e9, 0, 2e9), Egress: dir(10e9, 0, 1e9)}), true},
		{"capacity became unknown", &base, 3 * time.Second,
			with(bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(-1, 0, 2e9), Egress: dir(10e9, 0, 1e9)}), true},
		{"capacity changed", &base, 3 * time.Second,
			with(bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(25e9, 0, 2e9), Egress: dir(10e9, 0, 1e9)}), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := bandwidthDue(cfg, c.last, t0, c.next, t0.Add(c.elapsed)); got != c.want {
				t.Errorf("due = %v, want %v", got, c.want)
			}
		})
	}
}

func newFakes(t *testing.T, objs ...runtime.Object) (*dynamicfake.FakeDynamicClient, *kubefake.Clientset) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		v1alpha1.GroupVersion.WithResource("nodebandwidths"): "NodeBandwidthList",
		v1alpha1.GroupVersion.WithResource("nodetopologies"): "NodeTopologyList",
	}, objs...)
	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid-1"}})
	return dyn, kube
}

func countActions(dyn *dynamicfake.FakeDynamicClient, verb, subresource string) int {
	n := 0
	for _, a := range dyn.Actions() {
		if a.GetVerb() == verb && a.GetSubresource() == subresource {
			n++
		}
	}
	return n
}

func TestBandwidthReporterWritesOwnedObjectOnlyWhenDue(t *testing.T) {
	dyn, kube := newFakes(t)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	r := NewBandwidthReporter(BandwidthConfig{AgentVersion: "test"}, dyn, kube, "node-1", NewMetrics(nil), clk)
	ctx := context.Background()
	steady := bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(1e9, 0, 100e6), Egress: dir(1e9, 0, 100e6)}

	wrote, err := r.Offer(ctx, snapshot(clk.Now(), steady))
	if err != nil || !wrote {
		t.Fatalf("first offer: wrote %v, err %v", wrote, err)
	}
	obj, err := dyn.Resource(v1alpha1.GroupVersion.WithResource("nodebandwidths")).Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	refs := obj.GetOwnerReferences()
	if len(refs) != 1 || refs[0].Kind != "Node" || refs[0].Name != "node-1" || refs[0].UID != "uid-1" {
		t.Errorf("owner references = %+v, want the Node node-1", refs)
	}
	var nbw v1alpha1.NodeBandwidth
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &nbw); err != nil {
		t.Fatal(err)
	}
	if got := nbw.Status.Total.Ingress.Remaining.String(); got != "900M" {
		t.Errorf("published total ingress remaining = %s, want 900M", got)
	}

	// 29 s of steady samples: nothing written.
	for i := 0; i < 29; i++ {
		clk.SetTime(clk.Now().Add(time.Second))
		if wrote, err := r.Offer(ctx, snapshot(clk.Now(), steady)); wrote || err != nil {
			t.Fatalf("steady sample %d: wrote %v, err %v", i, wrote, err)
		}
	}
	// The 30th second is the heartbeat.
	clk.SetTime(clk.Now().Add(time.Second))
	if wrote, err := r.Offer(ctx, snapshot(clk.Now(), steady)); !wrote || err != nil {
		t.Fatalf("heartbeat: wrote %v, err %v", wrote, err)
	}
	if n := countActions(dyn, "update", "status"); n != 2 {
		t.Errorf("status updates = %d, want 2", n)
	}
	if n := countActions(dyn, "create", ""); n != 1 {
		t.Errorf("creates = %d, want 1", n)
	}
}

// A restarted agent's reports carry the window it has measured, and the first full
// one is written at once (after the minimum interval), not at the next heartbeat: the
// ranker uses no report over a shorter window.
func TestBandwidthReporterWritesWhenTheWindowFills(t *testing.T) {
	dyn, kube := newFakes(t)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	r := NewBandwidthReporter(BandwidthConfig{}, dyn, kube, "node-1", NewMetrics(nil), clk)
	ctx := context.Background()
	steady := bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(1e9, 0, 100e6), Egress: dir(1e9, 0, 100e6)}
	offer := func(observed time.Duration) bool {
		t.Helper()
		snap := snapshot(clk.Now(), steady)
		snap.Window = observed
		wrote, err := r.Offer(ctx, snap)
		if err != nil {
			t.Fatal(err)
		}
		return wrote
	}
	if !offer(3 * time.Second) {
		t.Fatal("the first report was not written")
	}
	nbw, err := dyn.Resource(v1alpha1.GroupVersion.WithResource("nodebandwidths")).Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w, _, _ := unstructuredString(nbw.Object, "status", "window"); w != "3s" {
		t.Errorf("published window %q, want the 3s observed", w)
	}
	for s := 4; s < 60; s++ {
		clk.SetTime(clk.Now().Add(time.Second))
		if wrote := offer(time.Duration(s) * time.Second); wrote && s != 33 {
			t.Errorf("a steady partial report written at %ds", s)
		}
	}
	clk.SetTime(clk.Now().Add(time.Second))
	if !offer(time.Minute) {
		t.Error("the first full report was not written at once")
	}
	clk.SetTime(clk.Now().Add(5 * time.Second))
	if offer(time.Minute) {
		t.Error("a steady full report was written before the heartbeat")
	}
}

func TestWriterRetriesConflicts(t *testing.T) {
	dyn, kube := newFakes(t)
	conflicts := 2
	dyn.PrependReactor("update", "nodebandwidths", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(v1alpha1.Resource("nodebandwidths"), "node-1", errors.New("stale"))
		}
		return false, nil, nil
	})
	m := NewMetrics(nil)
	w := newWriter(kindBandwidth, "nodebandwidths", dyn, kube, "node-1", m)
	w.backoff.Duration = time.Millisecond
	if err := w.write(context.Background(), &v1alpha1.NodeBandwidthStatus{AgentVersion: "x"}); err != nil {
		t.Fatalf("write after conflicts: %v", err)
	}
	if conflicts != 0 {
		t.Errorf("%d conflicts left unconsumed", conflicts)
	}
}

// Writes start from the object the last write returned: after the first, a heartbeat
// is one status update and no read. A conflict or a deleted object sends the retry
// back to a fresh read, or a create.
func TestWriterStartsFromLastObject(t *testing.T) {
	dyn, kube := newFakes(t)
	w := newWriter(kindBandwidth, "nodebandwidths", dyn, kube, "node-1", NewMetrics(nil))
	w.backoff.Duration = time.Millisecond
	ctx := context.Background()
	// write writes a status and returns the reads, status updates and creates it took.
	write := func(step, version string) (gets, updates, creates int) {
		t.Helper()
		dyn.ClearActions()
		if err := w.write(ctx, &v1alpha1.NodeBandwidthStatus{AgentVersion: version}); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		gets, updates, creates = countActions(dyn, "get", ""), countActions(dyn, "update", "status"), countActions(dyn, "create", "")
		obj, err := dyn.Resource(v1alpha1.GroupVersion.WithResource("nodebandwidths")).Get(ctx, "node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got, _, _ := unstructuredString(obj.Object, "status", "agentVersion"); got != version {
			t.Fatalf("%s: published agentVersion %q, want %q", step, got, version)
		}
		return gets, updates, creates
	}
	if g, u, c := write("first", "v1"); g != 1 || u != 1 || c != 1 {
		t.Errorf("first write: %d gets, %d status updates, %d creates; want 1 each", g, u, c)
	}
	for i := range 3 {
		if g, u, c := write("steady", fmt.Sprint("v", i+2)); g != 0 || u != 1 || c != 0 {
			t.Fatalf("steady write %d: %d gets, %d status updates, %d creates; want one update only", i, g, u, c)
		}
	}

	conflicts := 1
	dyn.PrependReactor("update", "nodebandwidths", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(v1alpha1.Resource("nodebandwidths"), "node-1", errors.New("stale"))
		}
		return false, nil, nil
	})
	if g, u, _ := write("after a conflict", "v10"); g != 1 || u != 2 {
		t.Errorf("a conflict: %d gets, %d status updates; want a fresh read and a second update", g, u)
	}

	// The object went with its Node (or by hand): the retry creates it again.
	if err := dyn.Resource(v1alpha1.GroupVersion.WithResource("nodebandwidths")).Delete(ctx, "node-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, c := write("after the object was deleted", "v11"); c != 1 {
		t.Errorf("a deleted object: %d creates, want 1", c)
	}
	if g, u, c := write("steady again", "v12"); g != 0 || u != 1 || c != 0 {
		t.Errorf("steady after the re-create: %d gets, %d status updates, %d creates; want one update only", g, u, c)
	}
}

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	return unstructured.NestedString(obj, fields...)
}

func TestWriterGivesUpOnForbidden(t *testing.T) {
	dyn, kube := newFakes(t)
	calls := 0
	dyn.PrependReactor("get", "nodebandwidths", func(clienttesting.Action) (bool, runtime.Object, error) {
		calls++
		return true, nil, apierrors.NewForbidden(v1alpha1.Resource("nodebandwidths"), "node-1", errors.New("rbac"))
	})
	w := newWriter(kindBandwidth, "nodebandwidths", dyn, kube, "node-1", NewMetrics(nil))
	w.backoff.Duration = time.Millisecond
	err := w.write(context.Background(), &v1alpha1.NodeBandwidthStatus{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("err = %v, want Forbidden", err)
	}
	if calls != 1 {
		t.Errorf("get calls = %d, want 1 (no retry of a Forbidden)", calls)
	}
}

// A node whose writes fail does not try every sample interval: after a failed round it
// waits the minimum interval, twice as long after each further one, up to the maximum,
// and a write that goes through ends the wait.
func TestBandwidthReporterBacksOffFailedRounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		// attempts are the writer's tries per round: a Forbidden is not retried.
		attempts int
	}{
		{"forbidden", apierrors.NewForbidden(v1alpha1.Resource("nodebandwidths"), "node-1", errors.New("rbac")), 1},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dyn, kube := newFakes(t)
			clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
			r := NewBandwidthReporter(BandwidthConfig{AgentVersion: "test", MinInterval: 2 * time.Second, MaxInterval: 30 * time.Second}, dyn, kube, "node-1", NewMetrics(nil), clk)
			r.w.backoff.Duration = time.Microsecond
			ctx := context.Background()
			steady := bandwidth.InterfaceSample{Name: "eth0", Ingress: dir(1e9, 0, 100e6), Egress: dir(1e9, 0, 100e6)}
			if wrote, err := r.Offer(ctx, snapshot(clk.Now(), steady)); !wrote || err != nil {
				t.Fatalf("first offer: wrote %v, err %v", wrote, err)
			}
			failing := true
			dyn.PrependReactor("update", "nodebandwidths", func(clienttesting.Action) (bool, runtime.Object, error) {
				if failing {
					return true, nil, tc.err
				}
				return false, nil, nil
			})
			// Two minutes of an unchanged node offered every second, as the agent's loop
			// does: due from 30s on, then tried at 30, 32, 36, 44, 60, 90 and 120s.
			var tried []int
			for sec := 1; sec <= 120; sec++ {
				clk.SetTime(clk.Now().Add(time.Second))
				before := countActions(dyn, "update", "status")
				if wrote, _ := r.Offer(ctx, snapshot(clk.Now(), steady)); wrote {
					t.Fatalf("second %d: a write went through", sec)
				}
				if n := countActions(dyn, "update", "status") - before; n > 0 {
					if n != tc.attempts {
						t.Errorf("second %d: %d tries, want %d", sec, n, tc.attempts)
					}
					tried = append(tried, sec)
				}
			}
			if want := []int{30, 32, 36, 44, 60, 90, 120}; !slices.Equal(tried, want) {
				t.Errorf("rounds tried at seconds %v, want %v", tried, want)
			}
			// The API server takes writes again: the next due round writes, and the one
			// after waits only for what is due.
			failing = false
			clk.SetTime(clk.Now().Add(30 * time.Second))
			if wrote, err := r.Offer(ctx, snapshot(clk.Now(), steady)); !wrote || err != nil {
				t.Fatalf("after the API server came back: wrote %v, err %v", wrote, err)
			}
			clk.SetTime(clk.Now().Add(30 * time.Second))
			if wrote, err := r.Offer(ctx, snapshot(clk.Now(), steady)); !wrote || err != nil {
				t.Fatalf("the next heartbeat: wrote %v, err %v", wrote, err)
			}
		})
	}
}

func TestTopologyReporter(t *testing.T) {
	gpu := func(addr string) v1alpha1.PCIDevice {
		return v1alpha1.PCIDevice{Address: addr, Class: "0x030200", Vendor: "0x10de", Device: "0x20b0", Driver: "nvidia",
			Kind: v1alpha1.KindGPU, NUMANode: ptr.To[int32](0), Health: v1alpha1.Healthy}
	}
	topo := v1alpha1.Topology{
		NUMANodes:  []v1alpha1.NUMANode{{ID: 0, CPUs: []int32{0, 1}, MemoryBytes: 1 << 30, Distances: []int32{10}}},
		PCIDevices: []v1alpha1.PCIDevice{gpu("0000:3b:00.0"), gpu("0000:3c:00.0")},
		NICs: []v1alpha1.NIC{
			{Name: "eth0", PCIAddress: ptr.To("0000:3d:00.0"), NUMANode: ptr.To[int32](0)},
			{Name: "veth1234", NUMANode: nil},
		},
	}
	// The agent published both GPUs before it restarted; one is gone now.
	prev := &v1alpha1.NodeTopology{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeTopology"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status:     v1alpha1.NodeTopologyStatus{Topology: topo},
	}
	dyn, kube := newFakes(t, prev)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	r := NewTopologyReporter(TopologyConfig{AgentVersion: "test"}, dyn, kube, "node-1", NewMetrics(nil), clk)
	var offered []v1alpha1.PCIDevice
	r.OnDevices = func(devs []v1alpha1.PCIDevice) map[string]string {
		offered = slices.Clone(devs)
		return map[string]string{"0000:3c:00.0": "exclude:address=0000:3c:00.0"}
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	now := topo
	now.PCIDevices = []v1alpha1.PCIDevice{gpu("0000:3b:00.0")}
	get := func() v1alpha1.NodeTopology { return publishedTopology(t, dyn, "node-1") }
	if wrote, err := r.Offer(ctx, now); !wrote || err != nil {
		t.Fatalf("first offer: wrote %v err %v", wrote, err)
	}
	nt := get()
	if s := nt.Status.Summary; s == nil || s.Devices != 2 || s.UnhealthyDevices != 1 || s.CPUs != 2 || s.NUMANodes != 1 {
		t.Errorf("summary = %+v, want 1 NUMA node, 2 CPUs, 2 devices, 1 unhealthy", s)
	}
	if len(offered) != 2 || offered[1].Health != v1alpha1.Unhealthy {
		t.Errorf("devices given to OnDevices = %+v, want both GPUs, the vanished one Unhealthy", offered)
	}
	if got := nt.Status.PCIDevices[1].Excluded; got != "exclude:address=0000:3c:00.0" {
		t.Errorf("excluded = %q, want the reason OnDevices gave", got)
	}
	if nt.Status.PCIDevices[0].Excluded != "" || nt.Status.PCIDevices[0].Holder != nil {
		t.Errorf("the first GPU published as %+v, want neither excluded nor held", nt.Status.PCIDevices[0])
	}
	// The audit finds a pod holding the first GPU: published with the next offer.
	r.SetHolders(map[string]v1alpha1.DeviceHolder{"0000:3b:00.0": {Namespace: "ns", Name: "train", UID: "u1"}})
	clk.SetTime(clk.Now().Add(time.Second))
	if wrote, err := r.Offer(ctx, now); !wrote || err != nil {
		t.Fatalf("offer after a holder appeared: wrote %v err %v", wrote, err)
	}
	if h := get().Status.PCIDevices[0].Holder; h == nil || h.Name != "train" || h.UID != "u1" {
		t.Errorf("holder = %+v, want ns/train", h)
	}
	r.SetHolders(nil)
	if wrote, _ := r.Offer(ctx, now); !wrote {
		t.Error("the holder's going was not written")
	}
	nt = get()
	if len(nt.Status.NICs) != 1 || nt.Status.NICs[0].Name != "eth0" {
		t.Errorf("published NICs = %+v, want only the PCI-backed eth0", nt.Status.NICs)
	}
	if h := nt.Status.PCIDevices[1].Health; nt.Status.PCIDevices[1].Address != "0000:3c:00.0" || h != v1alpha1.Unhealthy {
		t.Errorf("vanished GPU published as %+v, want Unhealthy", nt.Status.PCIDevices[1])
	}

	clk.SetTime(clk.Now().Add(time.Minute))
	if wrote, _ := r.Offer(ctx, now); wrote {
		t.Error("unchanged topology written before the resync")
	}
	podStarted := now
	podStarted.NICs = append(slices.Clone(now.NICs), v1alpha1.NIC{Name: "veth5678"})
	if wrote, _ := r.Offer(ctx, podStarted); wrote {
		t.Error("a new pod's veth rewrote NodeTopology")
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	if wrote, _ := r.Offer(ctx, topo); !wrote {
		t.Error("the GPU's return was not written")
	}
	if s := get().Status.Summary; s.UnhealthyDevices != 0 {
		t.Errorf("after the GPU came back: %d unhealthy, want 0", s.UnhealthyDevices)
	}
	if len(offered) != 2 || offered[1].Health != v1alpha1.Healthy {
		t.Errorf("after the GPU came back, OnDevices got %+v", offered)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" {
			t.Errorf("the reporter patched the Node: %v (the device plugin advertises devices)", a)
		}
	}
	clk.SetTime(clk.Now().Add(10 * time.Minute))
	if wrote, _ := r.Offer(ctx, topo); !wrote {
		t.Error("no write at the resync")
	}
	if got := get().Status.NUMAPinning; got != v1alpha1.PinningOff {
		t.Errorf("numaPinning = %q without a pinner, want Off", got)
	}
}

// publishedTopology is the node's NodeTopology as the fake API server holds it.
func publishedTopology(t *testing.T, dyn dynamic.Interface, node string) v1alpha1.NodeTopology {
	t.Helper()
	obj, err := dyn.Resource(v1alpha1.GroupVersion.WithResource("nodetopologies")).Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nt v1alpha1.NodeTopology
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &nt); err != nil {
		t.Fatal(err)
	}
	return nt
}

// TestTopologyReporterPinning: the pinner's state is published, and its change is
// written at the next offer though the topology is the same.
func TestTopologyReporterPinning(t *testing.T) {
	topo := v1alpha1.Topology{NUMANodes: []v1alpha1.NUMANode{{ID: 0, CPUs: []int32{0, 1}, MemoryBytes: 1 << 30, Distances: []int32{10}}}}
	dyn, kube := newFakes(t)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	state := v1alpha1.PinningPending
	r := NewTopologyReporter(TopologyConfig{NUMAPinning: func() v1alpha1.NUMAPinning { return state }}, dyn, kube, "node-1", NewMetrics(nil), clk)
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	published := func() v1alpha1.NUMAPinning { return publishedTopology(t, dyn, "node-1").Status.NUMAPinning }
	for i, want := range []v1alpha1.NUMAPinning{v1alpha1.PinningPending, v1alpha1.PinningKubeletStaticCPUManager, v1alpha1.PinningActive} {
		state = want
		clk.SetTime(clk.Now().Add(time.Second))
		if wrote, err := r.Offer(ctx, topo); !wrote || err != nil {
			t.Fatalf("offer %d (%s): wrote %v, err %v", i, want, wrote, err)
		}
		if got := published(); got != want {
			t.Errorf("offer %d: numaPinning = %q, want %q", i, got, want)
		}
	}
	if wrote, _ := r.Offer(ctx, topo); wrote {
		t.Error("an unchanged topology and pinning state were written again before the resync")
	}
}

// TestRemoveStaleDeviceCapacity: what agents before the device plugin patched onto the
// Node goes, unless a registered plugin serves it; nothing else is touched.
func TestRemoveStaleDeviceCapacity(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{
		Capacity: corev1.ResourceList{"sextant.io/gpu": resource.MustParse("2"), "sextant.io/nvme": resource.MustParse("0"),
			corev1.ResourceCPU: resource.MustParse("8"), "example.com/fpga": resource.MustParse("1")},
		Allocatable: corev1.ResourceList{"sextant.io/gpu": resource.MustParse("2"), "sextant.io/nic": resource.MustParse("1"),
			corev1.ResourceCPU: resource.MustParse("8")},
	}}
	kube := kubefake.NewClientset(node)
	served := map[string]bool{"sextant.io/gpu": true}
	removed, err := RemoveStaleDeviceCapacity(context.Background(), kube, "node-1", func(r string) bool { return served[r] })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, []string{"sextant.io/nic", "sextant.io/nvme"}) {
		t.Errorf("removed %v, want sextant.io/nic and sextant.io/nvme", removed)
	}
	got, _ := kube.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{})
	for _, want := range []string{"sextant.io/gpu", "cpu", "example.com/fpga"} {
		if _, ok := got.Status.Capacity[corev1.ResourceName(want)]; !ok {
			t.Errorf("capacity lost %s: %v", want, got.Status.Capacity)
		}
	}
	for _, gone := range []corev1.ResourceName{"sextant.io/nvme", "sextant.io/nic"} {
		if _, ok := got.Status.Capacity[gone]; ok {
			t.Errorf("capacity still has %s", gone)
		}
		if _, ok := got.Status.Allocatable[gone]; ok {
			t.Errorf("allocatable still has %s", gone)
		}
	}
	kube.ClearActions()
	if removed, err := RemoveStaleDeviceCapacity(context.Background(), kube, "node-1", func(r string) bool { return served[r] }); err != nil || len(removed) != 0 {
		t.Errorf("second pass removed %v, %v", removed, err)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() == "patch" {
			t.Error("patched with nothing to remove")
		}
	}
}
