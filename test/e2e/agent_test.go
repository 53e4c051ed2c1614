//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	sextantv1 "sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/internal/netnstest"
)

// write is one NodeBandwidth status write the test saw through a watch.
type write struct {
	seen            time.Time
	resourceVersion string
	status          sextantv1.NodeBandwidthStatus
}

// watchWrites records every change of the named NodeBandwidth until the test ends.
func watchWrites(t *testing.T, name string) func() []write {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := local.dynamic.Resource(nodeBandwidthGVR).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	if err != nil {
		t.Fatalf("watch NodeBandwidth %s: %v", name, err)
	}
	var (
		mu     sync.Mutex
		writes []write
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			var nbw sextantv1.NodeBandwidth
			u, ok := ev.Object.(interface{ UnstructuredContent() map[string]any })
			if !ok || k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &nbw) != nil {
				continue
			}
			if nbw.Status.SampleTime == nil {
				continue // the create, before its first status write
			}
			mu.Lock()
			writes = append(writes, write{seen: time.Now(), resourceVersion: nbw.ResourceVersion, status: nbw.Status})
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return func() []write {
		mu.Lock()
		defer mu.Unlock()
		return append([]write(nil), writes...)
	}
}

func veth(s sextantv1.NodeBandwidthStatus) *sextantv1.InterfaceBandwidth {
	for i := range s.Interfaces {
		if s.Interfaces[i].Name == "veth-a" {
			return &s.Interfaces[i]
		}
	}
	return nil
}

// TestAgentPublishesBandwidth runs the agent as a process with the chart's RBAC, metering
// a veth shaped to 200 Mbit/s in a namespace the test made, for a Node object of its own.
func TestAgentPublishesBandwidth(t *testing.T) {
	requireRoot(t)
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	node := fakeNode(t, "e2e-meter-")
	pair := newVethPair(t, 1, "200mbit")
	const (
		capacity    = 200e6
		minInterval = 2 * time.Second
		maxInterval = 10 * time.Second
		sample      = time.Second
	)
	startProcess(t, agentBinary(t), "run", "--logging-format=json",
		"--kubeconfig", agentKubeconfig(t, node.Name),
		"--node-name", node.Name, "--metrics-addr", "", "--sidecar-terminator=false", "--numa-pinning=false", "--device-plugin=false",
		"--netns", "/var/run/netns/"+pair.nsA, "--interfaces", "veth-a", "--nic-capacity", "veth-a=200M",
		"--sample-interval", sample.String(), "--window", "5s",
		"--report-min-interval", minInterval.String(), "--report-max-interval", maxInterval.String())
	writes := watchWrites(t, node.Name)

	var first *sextantv1.NodeBandwidth
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		nbw, err := getNodeBandwidth(ctx, node.Name)
		// The steady period starts with a full window: the report that first covers one
		// is written at once (the window became full), which is not a heartbeat.
		if err != nil || veth(nbw.Status) == nil || nbw.Status.Window == nil || nbw.Status.Window.Duration < 5*time.Second {
			return false, nil
		}
		first = nbw
		return true, nil
	})
	if err != nil {
		t.Fatalf("no NodeBandwidth with veth-a and a full window for %s: %v", node.Name, err)
	}
	if refs := first.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != node.UID {
		t.Errorf("owner references = %+v, want Node %s", refs, node.Name)
	}
	if c := veth(first.Status).Egress.Capacity; c == nil || c.Value() != capacity {
		t.Errorf("veth-a egress capacity = %v, want 200M from --nic-capacity", c)
	}

	// A steady (idle) link: only the max-interval heartbeat is written. Two of them,
	// each a max-interval after the write before (the first after the full-window one).
	// The watch may deliver the full-window write itself after the poll above read it:
	// it does not count.
	steadyFrom := time.Now()
	var steady []write
	eventually(t, 4*maxInterval, func() (bool, string) {
		steady = nil
		for _, w := range writes() {
			if w.seen.After(steadyFrom) && w.resourceVersion != first.ResourceVersion {
				steady = append(steady, w)
			}
		}
		return len(steady) >= 2, fmt.Sprintf("idle link: %d writes since %s, want 2 heartbeats", len(steady), steadyFrom.Format(time.TimeOnly))
	})
	previous := first.Status.SampleTime.Time
	for _, w := range steady {
		// sampleTime is truncated to the second, hence the second off.
		if gap := w.status.SampleTime.Sub(previous); gap < maxInterval-time.Second {
			t.Errorf("idle link: writes %v apart, want heartbeats only (%v)", gap, maxInterval)
		}
		previous = w.status.SampleTime.Time
	}
	t.Logf("idle link: %d writes in %v", len(steady), time.Since(steadyFrom).Round(time.Second))

	// Traffic beyond the threshold, started right after the last heartbeat (the poll
	// above saw it within 200 ms): the write showing it comes at the first sample that
	// sees it, long before the next heartbeat, max-interval after this one.
	heartbeat := steady[len(steady)-1]
	trafficStart := time.Now()
	pair.traffic(t, 6*time.Second, false)
	var hit *write
	for _, w := range writes() {
		v := veth(w.status)
		if w.seen.After(trafficStart) && v != nil && v.Egress.Remaining != nil && v.Egress.Remaining.AsApproximateFloat64() < capacity/2 {
			hit = &w
			break
		}
	}
	if hit == nil {
		t.Fatalf("no write showing the traffic; writes since it started: %d", len(writes()))
	}
	// Measured from the heartbeat, not from iperf3's start, which a loaded machine
	// delays by seconds. Both sampleTimes are truncated to the second: the next heartbeat
	// would be at least max-interval - 1s after this one; two seconds short of that leaves
	// iperf3 about six seconds to start.
	lag := hit.status.SampleTime.Sub(heartbeat.status.SampleTime.Time)
	if lag > maxInterval-2*time.Second {
		t.Errorf("first write showing traffic sampled %v after the heartbeat before it, want at most %v: a change is written when a sample sees it, not at the next heartbeat (%v)",
			lag, maxInterval-2*time.Second, maxInterval)
	}
	v := veth(hit.status)
	t.Logf("traffic: written %v after iperf3 was started, sampled %v after the heartbeat; egress rate %s peak %s remaining %s; ingress remaining %s",
		hit.seen.Sub(trafficStart).Round(time.Millisecond), lag, v.Egress.Rate, v.Egress.Peak, v.Egress.Remaining, v.Ingress.Remaining)
	// Traffic went A→B: egress of veth-a. Ingress carried only the ACKs.
	last := veth(writes()[len(writes())-1].status)
	if p := last.Egress.Peak.AsApproximateFloat64(); p < 0.75*capacity || p > 1.05*capacity {
		t.Errorf("egress peak = %s, want near the shaped 200M", last.Egress.Peak)
	}
	if r := last.Ingress.Remaining.AsApproximateFloat64(); r < 0.8*capacity {
		t.Errorf("ingress remaining = %s during egress traffic: directions swapped?", last.Ingress.Remaining)
	}
	if rem, peak := last.Egress.Remaining.AsApproximateFloat64(), last.Egress.Peak.AsApproximateFloat64(); rem != max(capacity-peak, 0) && (rem-max(capacity-peak, 0) > 1000 || max(capacity-peak, 0)-rem > 1000) {
		t.Errorf("egress remaining %v != capacity %v - peak %v", rem, capacity, peak)
	}

	// Deleting the Node deletes its NodeBandwidth, and the agent does not bring it back.
	if err := local.kube.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := getNodeBandwidth(ctx, node.Name)
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("NodeBandwidth outlived its Node: %v", err)
	}
	time.Sleep(maxInterval)
	if _, err := getNodeBandwidth(ctx, node.Name); !apierrors.IsNotFound(err) {
		t.Errorf("NodeBandwidth of a deleted Node came back (err %v)", err)
	}
}

// fixtureRoot extracts one of hwloc's sysfs trees (agent/topology/testdata/hwloc) into
// a temporary directory and returns the sysfs/procfs root inside it.
func fixtureRoot(t *testing.T, tarball string) string {
	t.Helper()
	path := filepath.Join(repoRoot(t), "agent", "topology", "testdata", "hwloc", tarball)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("hwloc fixture %s: %v", tarball, err)
	}
	dir := t.TempDir()
	run(t, "tar", "-xjf", path, "-C", dir)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("fixture %s: want one top directory, got %v (err %v)", tarball, entries, err)
	}
	return filepath.Join(dir, entries[0].Name())
}

// TestAgentPublishesTopologyFromFixture points the agent at a real two-socket machine's
// sysfs and takes a device's driver away in the copy.
func TestAgentPublishesTopologyFromFixture(t *testing.T) {
	requireRoot(t)
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	root := fixtureRoot(t, "32em64t-2n8c+dax+nvme+mic+dimms.tar.bz2")
	node := fakeNode(t, "e2e-topo-")
	pair := newVethPair(t, 2, "100mbit")
	startProcess(t, agentBinary(t), "run", "--logging-format=json",
		"--kubeconfig", agentKubeconfig(t, node.Name),
		"--node-name", node.Name, "--metrics-addr", "", "--sysfs-root", root, "--sidecar-terminator=false", "--numa-pinning=false", "--device-plugin=false",
		"--netns", "/var/run/netns/"+pair.nsA, "--interfaces", "veth-a",
		"--topology-interval", "1s")

	const mic = "0000:83:00.0" // a Xeon Phi on NUMA node 1, driver "mic"
	device := func(nt *sextantv1.NodeTopology) *sextantv1.PCIDevice {
		for i := range nt.Status.PCIDevices {
			if nt.Status.PCIDevices[i].Address == mic {
				return &nt.Status.PCIDevices[i]
			}
		}
		return nil
	}
	waitTopology := func(what string, ok func(*sextantv1.NodeTopology) bool) *sextantv1.NodeTopology {
		t.Helper()
		var got *sextantv1.NodeTopology
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 45*time.Second, true, func(ctx context.Context) (bool, error) {
			nt, err := getNodeTopology(ctx, node.Name)
			if err != nil {
				return false, nil
			}
			got = nt
			return ok(nt), nil
		})
		if err != nil {
			t.Fatalf("NodeTopology %s never %s; last: %+v", node.Name, what, got)
		}
		return got
	}

	nt := waitTopology("showed the fixture", func(nt *sextantv1.NodeTopology) bool { return device(nt) != nil })
	s := nt.Status.Summary
	if s == nil || s.NUMANodes != 2 || s.CPUs != 16 || s.UnhealthyDevices != 0 {
		t.Errorf("summary = %+v, want 2 NUMA nodes, 16 CPUs, no unhealthy device", s)
	}
	if d := device(nt); d.Kind != sextantv1.KindAccelerator || d.NUMANode == nil || *d.NUMANode != 1 || d.Health != sextantv1.Healthy {
		t.Errorf("%s = %+v, want a Healthy accelerator on NUMA node 1", mic, d)
	}
	if refs := nt.OwnerReferences; len(refs) != 1 || refs[0].UID != node.UID {
		t.Errorf("owner references = %+v, want Node %s", refs, node.Name)
	}

	// The host scan cannot read the fixture's routes and mounts: it holds its NICs and
	// NVMe drives back, and says so in NodeTopology; the accelerator may go to pods. (The
	// agent runs for a Node without a kubelet, so it serves no device plugin.)
	waitTopology("published which devices are kept from pods", func(nt *sextantv1.NodeTopology) bool {
		var nvmeKept, accelFree bool
		for _, d := range nt.Status.PCIDevices {
			switch d.Kind {
			case sextantv1.KindNVMe:
				nvmeKept = nvmeKept || strings.Contains(d.Excluded, "mountinfo")
			case sextantv1.KindAccelerator:
				accelFree = d.Address == mic && d.Excluded == ""
			}
		}
		return nvmeKept && accelFree
	})

	// The driver lets go of the device: it must be published Unhealthy.
	link := filepath.Join(root, "sys", "bus", "pci", "devices", mic, "driver")
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatalf("fixture has no driver link for %s: %v", mic, err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	waitTopology("marked the device Unhealthy", func(nt *sextantv1.NodeTopology) bool {
		d := device(nt)
		return d != nil && d.Health == sextantv1.Unhealthy && nt.Status.Summary.UnhealthyDevices == 1
	})
	// And Healthy again once it is back.
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	waitTopology("marked the device Healthy again", func(nt *sextantv1.NodeTopology) bool {
		d := device(nt)
		return d != nil && d.Health == sextantv1.Healthy && nt.Status.Summary.UnhealthyDevices == 0
	})
}

// TestAgentDaemonSet checks the chart's agent runs on the real node with the privileges
// the chart gives it, and publishes both heartbeats and its metrics.
func TestAgentDaemonSet(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := local.kube.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=agent",
			FieldSelector: "spec.nodeName=" + local.nodeName,
		})
		if err != nil || len(pods.Items) != 1 {
			return false, nil
		}
		pod = &pods.Items[0]
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("agent pod on %s not Ready: %v; pod: %+v", local.nodeName, err, podSummary(pod))
	}
	// The agent meters the default-route NIC (deploy.sh names it): a fresh NodeBandwidth
	// with it must appear.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		nbw, err := getNodeBandwidth(ctx, local.nodeName)
		return err == nil && len(nbw.Status.Interfaces) > 0 && time.Since(nbw.Status.SampleTime.Time) < time.Minute, nil
	})
	if err != nil {
		nbw, _ := getNodeBandwidth(ctx, local.nodeName)
		t.Errorf("no fresh NodeBandwidth %s with an interface: %v; last: %+v", local.nodeName, err, nbw)
	}
	// The topology loop publishes independently of the meter's first sample.
	var nt *sextantv1.NodeTopology
	eventually(t, 30*time.Second, func() (bool, string) {
		nt, err = getNodeTopology(ctx, local.nodeName)
		return err == nil && nt.Status.Summary != nil, fmt.Sprintf("NodeTopology %s: %v", local.nodeName, err)
	})
	if s := nt.Status.Summary; s == nil || s.NUMANodes < 1 || int(s.CPUs) != runtime.NumCPU() {
		t.Errorf("NodeTopology summary = %+v, want ≥1 NUMA node and %d CPUs", s, runtime.NumCPU())
	}
	// Over HTTPS, with the token of an account bound to sextant-metrics-reader.
	addr := nodeInternalIP(t, local.nodeName) + ":9464"
	body := agentMetrics(t, addr, metricsReader(t, addr))
	for _, want := range []string{"sextant_nic_bytes_total{", "sextant_nic_packets_total{", "sextant_report_writes_total{kind=\"NodeBandwidth\"}"} {
		if !strings.Contains(body, want) {
			t.Errorf("agent metrics lack %s", want)
		}
	}
}

func podSummary(p *corev1.Pod) string {
	if p == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s phase=%s", p.Name, p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, " %s ready=%v restarts=%d state=%+v", c.Name, c.Ready, c.RestartCount, c.State)
	}
	return b.String()
}

// TestDashboardsQueryExistingMetrics scrapes the agent of the real node, with a metered
// interface of known capacity (the demo veth), and checks that every metric the agent's
// dashboard queries is among what the agent exports.
func TestDashboardsQueryExistingMetrics(t *testing.T) {
	requireRoot(t)
	installCRDs(t)
	deployChart(t)
	demoNetUp(t)
	ctx := context.Background()
	addr := nodeInternalIP(t, local.nodeName) + ":9464"
	token := metricsReader(t, addr)
	var body string
	// deploy.sh meters sxdemo0 with a known capacity; the agent picks it up at a rescan.
	err := wait.PollUntilContextTimeout(ctx, time.Second, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		code, b, err := agentGet(addr, "/metrics", token)
		if err != nil || code != http.StatusOK {
			return false, nil
		}
		body = b
		// deploy.sh has the agent keep guarantees on the demo network: it shapes sxdemo0
		// once it meters it.
		return strings.Contains(body, `sextant_nic_remaining_bytes_per_second{direction="egress",interface="sxdemo0"}`) &&
			strings.Contains(body, `sextant_enforcement_guarantees_enforced{network="demo"} 1`) &&
			strings.Contains(body, `sextant_enforcement_guaranteed_bytes_total{`), nil
	})
	if err != nil {
		t.Fatalf("the agent never exported remaining bandwidth for sxdemo0 and enforced guarantees on it: %v", err)
	}
	exported := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if name, _, ok := strings.Cut(line, "{"); ok && strings.HasPrefix(name, "sextant_") {
			exported[name] = true
		} else if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "sextant_") {
			exported[f[0]] = true
		}
	}
	// The agent's dashboard only: the others query the ranker and the webhook, which
	// TestDashboardsReturnData scrapes with a real Prometheus.
	dashboards := []string{filepath.Join(repoRoot(t), "charts", "sextant", "dashboards", "agent.json")}
	metricName := regexp.MustCompile(`\bsextant_[a-z_]+\b`)
	for _, path := range dashboards {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var dash struct {
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(data, &dash); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, p := range dash.Panels {
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q queries nothing", filepath.Base(path), p.Title)
			}
			for _, target := range p.Targets {
				names := metricName.FindAllString(target.Expr, -1)
				if len(names) == 0 {
					t.Errorf("%s: panel %q: no sextant metric in %q", filepath.Base(path), p.Title, target.Expr)
				}
				for _, n := range names {
					if !exported[n] {
						t.Errorf("%s: panel %q queries %s, which the agent does not export", filepath.Base(path), p.Title, n)
					}
				}
			}
		}
	}
}

// TestAgentPublishesNetworks runs the real agent in a network namespace with two veth
// pairs: veth-p carries the namespace's default route (the pod network, found without
// configuration) and veth-s is named storage by --network. iperf3 loads one, then the
// other: only that network's peak moves, and the other keeps its remaining.
func TestAgentPublishesNetworks(t *testing.T) {
	requireRoot(t)
	for _, tool := range []string{"ip", "tc", "iperf3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/deps.sh installs it)", tool)
		}
	}
	installCRDs(t)
	deployChart(t)
	ctx := context.Background()
	node := fakeNode(t, "e2e-networks-")
	suffix := fmt.Sprint(os.Getpid())
	nsA, nsP, nsS := "e2e-net-a-"+suffix, "e2e-net-p-"+suffix, "e2e-net-s-"+suffix
	t.Cleanup(func() {
		for _, ns := range []string{nsA, nsP, nsS} {
			_ = exec.Command("ip", "netns", "delete", ns).Run()
		}
	})
	for _, ns := range []string{nsA, nsP, nsS} {
		run(t, "ip", "netns", "add", ns)
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	// veth-p: A (10.251.1.1) to P (10.251.1.2), A's default route; veth-s: A (10.251.2.1)
	// to S (10.251.2.2). Both shaped to 200 Mbit/s on A's side.
	for _, l := range []struct{ dev, peer, peerNS, net string }{{"veth-p", "veth-pp", nsP, "1"}, {"veth-s", "veth-sp", nsS, "2"}} {
		run(t, "ip", "-n", nsA, "link", "add", l.dev, "type", "veth", "peer", "name", l.peer, "netns", l.peerNS)
		run(t, "ip", "-n", nsA, "addr", "add", "10.251."+l.net+".1/24", "dev", l.dev)
		run(t, "ip", "-n", l.peerNS, "addr", "add", "10.251."+l.net+".2/24", "dev", l.peer)
		run(t, "ip", "-n", nsA, "link", "set", l.dev, "up")
		run(t, "ip", "-n", l.peerNS, "link", "set", l.peer, "up")
		run(t, "ip", "netns", "exec", nsA, "tc", "qdisc", "add", "dev", l.dev, "root", "tbf", "rate", "200mbit", "burst", "256kb", "latency", "50ms")
		startProcess(t, "ip", "netns", "exec", l.peerNS, "iperf3", "-s", "-B", "10.251."+l.net+".2")
		netnstest.WaitListening(t, l.peerNS, 5201)
	}
	run(t, "ip", "-n", nsA, "route", "add", "default", "via", "10.251.1.2", "dev", "veth-p")

	const window = 5 * time.Second
	startProcess(t, agentBinary(t), "run", "--logging-format=json",
		"--kubeconfig", agentKubeconfig(t, node.Name),
		"--node-name", node.Name, "--metrics-addr", "", "--sidecar-terminator=false", "--numa-pinning=false", "--device-plugin=false",
		"--netns", "/var/run/netns/"+nsA, "--network", "storage=veth-s",
		"--nic-capacity", "veth-p=200M", "--nic-capacity", "veth-s=200M",
		"--sample-interval", "1s", "--window", window.String(), "--report-min-interval", "1s", "--report-max-interval", "5s")

	network := func(st sextantv1.NodeBandwidthStatus, name string) *sextantv1.NetworkBandwidth {
		for i := range st.Networks {
			if st.Networks[i].Name == name {
				return &st.Networks[i]
			}
		}
		return nil
	}
	peak := func(n *sextantv1.NetworkBandwidth) float64 {
		if n == nil || n.Egress.Peak == nil {
			return -1
		}
		return n.Egress.Peak.AsApproximateFloat64()
	}
	// waitNetworks polls until ok holds for the pod and storage networks.
	waitNetworks := func(what string, ok func(pod, storage *sextantv1.NetworkBandwidth) bool) {
		t.Helper()
		var last sextantv1.NodeBandwidthStatus
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 45*time.Second, true, func(ctx context.Context) (bool, error) {
			nbw, err := getNodeBandwidth(ctx, node.Name)
			if err != nil {
				return false, nil
			}
			last = nbw.Status
			return ok(network(last, "pod"), network(last, "storage")), nil
		})
		if err != nil {
			t.Fatalf("%s: %v; last networks %+v", what, err, last.Networks)
		}
	}
	waitNetworks("both networks published, idle", func(pod, storage *sextantv1.NetworkBandwidth) bool {
		return pod != nil && storage != nil && slices.Equal(pod.Interfaces, []string{"veth-p"}) && slices.Equal(storage.Interfaces, []string{"veth-s"}) &&
			pod.Egress.Capacity != nil && pod.Egress.Capacity.Value() == 200e6 && peak(pod) < 20e6 && peak(storage) < 20e6
	})

	// Traffic on the pod network: its peak moves, storage's does not.
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = exec.Command("ip", "netns", "exec", nsA, "iperf3", "-c", "10.251.1.2", "-t", "6").Run()
	}()
	waitNetworks("the pod network's peak moves under its traffic", func(pod, storage *sextantv1.NetworkBandwidth) bool {
		return peak(pod) > 100e6 && peak(storage) < 20e6 && storage.Egress.Remaining.AsApproximateFloat64() > 180e6
	})
	<-done
	// Once the window has passed, traffic on storage: its peak moves, the pod network's
	// falls back and stays.
	waitNetworks("the pod network's peak falls after its traffic", func(pod, _ *sextantv1.NetworkBandwidth) bool { return peak(pod) < 20e6 })
	done = make(chan struct{})
	go func() {
		defer close(done)
		_ = exec.Command("ip", "netns", "exec", nsA, "iperf3", "-c", "10.251.2.2", "-t", "6").Run()
	}()
	waitNetworks("the storage network's peak moves under its traffic", func(pod, storage *sextantv1.NetworkBandwidth) bool {
		return peak(storage) > 100e6 && peak(pod) < 20e6 && pod.Egress.Remaining.AsApproximateFloat64() > 180e6
	})
	<-done
}
