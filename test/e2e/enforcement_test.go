//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/annotations"
	sextantv1 "sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/internal/netnstest"
)

// shapedNode is the topology of the enforcement tests: a "node" namespace whose uplink
// up0 (to a "world" namespace) has a capacity of 1 Gbit/s, shaped so by tbf in both
// directions as a NIC and the switch port before it would be, and five "pod" namespaces
// routed behind the node. Every link has a 9000-byte MTU: rates are L2 rates, and at that
// MTU a TCP flow's goodput is close to its L2 rate, where at 1500 the headers take a
// visible share (docs/enforcement.md).
type shapedNode struct {
	node, world string
	worldIP     string
	pods        []shapedPod
}

type shapedPod struct {
	ns, ip string
}

const uplinkRate = 1e9

func newShapedNode(t *testing.T, pods int) *shapedNode {
	t.Helper()
	requireRoot(t)
	for _, tool := range []string{"ip", "tc", "iperf3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/deps.sh installs it)", tool)
		}
	}
	s := &shapedNode{worldIP: "10.249.0.2"}
	s.node, _ = netnstest.New(t, "e2e-enf-node-")
	s.world, _ = netnstest.New(t, "e2e-enf-world-")
	for _, ns := range []string{s.node, s.world} {
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "-n", s.node, "link", "add", "up0", "mtu", "9000", "type", "veth", "peer", "name", "w0", "mtu", "9000", "netns", s.world)
	run(t, "ip", "-n", s.node, "addr", "add", "10.249.0.1/24", "dev", "up0")
	run(t, "ip", "-n", s.world, "addr", "add", s.worldIP+"/24", "dev", "w0")
	run(t, "ip", "-n", s.node, "link", "set", "up0", "up")
	run(t, "ip", "-n", s.world, "link", "set", "w0", "up")
	run(t, "ip", "-n", s.world, "route", "add", "10.249.1.0/24", "via", "10.249.0.1")
	run(t, "ip", "netns", "exec", s.node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	for _, l := range []struct{ ns, dev string }{{s.node, "up0"}, {s.world, "w0"}} {
		run(t, "tc", "-n", l.ns, "qdisc", "add", "dev", l.dev, "root", "handle", "7:", "tbf", "rate", "1gbit", "burst", "512kb", "latency", "20ms")
	}
	for i := range pods {
		p := shapedPod{ip: fmt.Sprintf("10.249.1.%d", 10+i)}
		p.ns, _ = netnstest.New(t, fmt.Sprintf("e2e-enf-p%d-", i))
		host := fmt.Sprintf("h%d", i)
		run(t, "ip", "-n", s.node, "link", "add", host, "mtu", "9000", "type", "veth", "peer", "name", "eth0", "mtu", "9000", "netns", p.ns)
		run(t, "ip", "-n", s.node, "link", "set", host, "up")
		run(t, "ip", "-n", s.node, "route", "add", p.ip+"/32", "dev", host)
		// The pod's default route is on-link, as with Calico: the node answers its ARP.
		run(t, "ip", "netns", "exec", s.node, "sysctl", "-qw", "net.ipv4.conf."+host+".proxy_arp=1")
		run(t, "ip", "-n", p.ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", p.ns, "link", "set", "eth0", "up")
		run(t, "ip", "-n", p.ns, "addr", "add", p.ip+"/32", "dev", "eth0")
		run(t, "ip", "-n", p.ns, "route", "add", "default", "dev", "eth0")
		// Ingress: each pod serves; egress: the world serves one port per pod.
		startProcess(t, "ip", "netns", "exec", p.ns, "iperf3", "-s", "-B", p.ip)
		startProcess(t, "ip", "netns", "exec", s.world, "iperf3", "-s", "-B", s.worldIP, "-p", fmt.Sprint(5201+i))
		netnstest.WaitListening(t, p.ns, 5201)
		netnstest.WaitListening(t, s.world, 5201+i)
		s.pods = append(s.pods, p)
	}
	return s
}

// iperf3 runs a client in ns and returns what the receiver got, in bits/s.
func iperf3(t *testing.T, ns string, args ...string) float64 {
	t.Helper()
	out := run(t, "ip", append([]string{"netns", "exec", ns, "iperf3", "-J", "--connect-timeout", "5000"}, args...)...)
	var res struct {
		Error string `json:"error"`
		End   struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Error != "" || res.End.SumReceived.BitsPerSecond == 0 {
		t.Fatalf("iperf3 %s in %s: %v %s\n%s", strings.Join(args, " "), ns, err, res.Error, lastLines(out, 20))
	}
	return res.End.SumReceived.BitsPerSecond
}

// egress is pod i's TCP throughput to the world over secs seconds.
func (s *shapedNode) egress(t *testing.T, i, secs int) float64 {
	return iperf3(t, s.pods[i].ns, "-c", s.worldIP, "-p", fmt.Sprint(5201+i), "-t", fmt.Sprint(secs))
}

// ingress is pod i's TCP throughput from the world over secs seconds.
func (s *shapedNode) ingress(t *testing.T, i, secs int) float64 {
	return iperf3(t, s.world, "-c", s.pods[i].ip, "-t", fmt.Sprint(secs))
}

// contended runs measure while pods 1 to 3 push as hard as they can in direction dir:
// UDP at 1 Gbit/s each out of the node (forwarded packets have no socket to slow them
// down), four TCP flows each into it.
func (s *shapedNode) contended(t *testing.T, dir string, secs int, measure func() float64) float64 {
	t.Helper()
	var blasters []*exec.Cmd
	for i := 1; i <= 3; i++ {
		var cmd *exec.Cmd
		if dir == "egress" {
			cmd = exec.Command("ip", "netns", "exec", s.pods[i].ns, "iperf3", "-c", s.worldIP, "-p", fmt.Sprint(5201+i),
				"-u", "-b", "1G", "-l", "8900", "-t", fmt.Sprint(secs+3))
		} else {
			cmd = exec.Command("ip", "netns", "exec", s.world, "iperf3", "-c", s.pods[i].ip, "-P", "4", "-t", fmt.Sprint(secs+3))
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		blasters = append(blasters, cmd)
	}
	defer func() {
		for _, b := range blasters {
			_ = b.Process.Kill()
			_ = b.Wait()
		}
	}()
	time.Sleep(time.Second) // the blasters at full speed first
	return measure()
}

// enforcementPods creates the pods of the shaped node's namespaces in the API, bound to
// node and running with their namespaces' addresses, in order (pod 0 bound first).
func enforcementPods(t *testing.T, ns string, node *corev1.Node, s *shapedNode, ann []map[string]string) []*corev1.Pod {
	t.Helper()
	var out []*corev1.Pod
	for i := range ann {
		out = append(out, startShapedPod(t, ns, fmt.Sprintf("p%d", i), node, s.pods[i].ip, ann[i]))
	}
	return out
}

// startShapedPod creates a pod, binds it to node and marks it running at ip, as a
// kubelet would: the agent learns the pod's address from its status.
func startShapedPod(t *testing.T, ns, name string, node *corev1.Node, ip string, ann map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pods := local.kube.CoreV1().Pods(ns)
	p, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: corev1.PodSpec{
			SchedulerName: "e2e-nobody",
			Containers:    []corev1.Container{{Name: "c", Image: "none", ImagePullPolicy: corev1.PullNever}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	if err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Target: corev1.ObjectReference{Kind: "Node", Name: node.Name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind pod %s: %v", name, err)
	}
	if p, err = pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	if p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("mark pod %s running: %v", name, err)
	}
	return p
}

// startEnforcingAgent runs the agent for node in the shaped node's namespace, keeping
// the pod network's guarantees, with its state in stateDir.
func startEnforcingAgent(t *testing.T, node *corev1.Node, s *shapedNode, stateDir string, enforce bool) *process {
	t.Helper()
	args := []string{"run", "--logging-format=json",
		"--kubeconfig", agentKubeconfig(t, node.Name),
		"--node-name", node.Name, "--metrics-addr", "", "--sidecar-terminator=false", "--numa-pinning=false", "--device-plugin=false",
		"--netns", "/var/run/netns/" + s.node, "--interfaces", "up0", "--network", "pod=up0", "--nic-capacity", "up0=1G",
		"--sample-interval", "1s", "--window", "10s", "--report-min-interval", "1s", "--report-max-interval", "5s",
		"--state-dir", stateDir, "--enforcement-resync", "2s"}
	if enforce {
		args = append(args, "--enforce", "pod")
	}
	return startProcess(t, agentBinary(t), args...)
}

// podNetwork returns the pod network of the node's NodeBandwidth, nil while none.
func podNetwork(t *testing.T, node string) *sextantv1.NetworkBandwidth {
	nbw, err := getNodeBandwidth(context.Background(), node)
	if err != nil {
		return nil
	}
	for i := range nbw.Status.Networks {
		if nbw.Status.Networks[i].Name == annotations.PodNetwork {
			return &nbw.Status.Networks[i]
		}
	}
	return nil
}

// waitGuaranteed waits until the node's NodeBandwidth says the pod network's guarantees
// are enforced and add up to egress and ingress.
func waitGuaranteed(t *testing.T, node string, ingress, egress int64) {
	t.Helper()
	eventually(t, 60*time.Second, func() (bool, string) {
		n := podNetwork(t, node)
		if n == nil {
			return false, "no pod network in NodeBandwidth yet"
		}
		if len(n.Conditions) != 1 || n.Conditions[0].Status != metav1.ConditionTrue || n.Guarantees == nil {
			return false, fmt.Sprintf("conditions %+v, guarantees %+v", n.Conditions, n.Guarantees)
		}
		g := n.Guarantees
		return g.Ingress.Guaranteed.Value() == ingress && g.Egress.Guaranteed.Value() == egress,
			fmt.Sprintf("guaranteed ingress %s egress %s, want %d and %d", g.Ingress.Guaranteed, g.Egress.Guaranteed, ingress, egress)
	})
}

// TestEnforcementKeepsGuaranteesAndLimits: a pod placed for 400 Mbit/s each way gets
// more with enforcement than without while three neighbours push through the same
// 1 Gbit/s uplink, and a pod capped at 100 Mbit/s never gets more than that. How close
// to the 400M the pod comes, what it reaches alone, and how close the capped pod comes
// to its cap depend on how fast the machine pushes packets: the test prints them, on a
// line `make bench-enforce` judges against its goals, and asserts none.
func TestEnforcementKeepsGuaranteesAndLimits(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	s := newShapedNode(t, 5)
	node := readyFakeNode(t, "e2e-enforce-", nil, nil)
	ns := testNamespace(t)
	const required = 400e6
	enforcementPods(t, ns, node, s, []map[string]string{
		{annotations.EgressRequired: "400M", annotations.IngressRequired: "400M"},
		nil, nil, nil,
		{annotations.KubernetesEgressBandwidth: "100M", annotations.KubernetesIngressBandwidth: "100M"},
	})
	const secs = 5
	offEgress := s.contended(t, "egress", secs, func() float64 { return s.egress(t, 0, secs) })
	offIngress := s.contended(t, "ingress", secs, func() float64 { return s.ingress(t, 0, secs) })

	startEnforcingAgent(t, node, s, t.TempDir(), true)
	waitGuaranteed(t, node.Name, required, required)
	onEgress := s.contended(t, "egress", secs, func() float64 { return s.egress(t, 0, secs) })
	onIngress := s.contended(t, "ingress", secs, func() float64 { return s.ingress(t, 0, secs) })
	t.Logf("pod requiring 400M, three neighbours pushing: egress %.0f Mbit/s with enforcement, %.0f without; ingress %.0f with, %.0f without",
		onEgress/1e6, offEgress/1e6, onIngress/1e6, offIngress/1e6)
	// Without enforcement the neighbours' three flows take most of the uplink; with it,
	// the shaper serves the reserved pod first.
	for _, c := range []struct {
		dir     string
		on, off float64
	}{{"egress", onEgress, offEgress}, {"ingress", onIngress, offIngress}} {
		if c.on <= c.off {
			t.Errorf("%s: %.0f Mbit/s with enforcement, %.0f without: enforcement made no difference", c.dir, c.on/1e6, c.off/1e6)
		}
	}

	// Work-conserving: alone, the reserved pod takes what nobody else uses.
	aloneEgress, aloneIngress := s.egress(t, 0, secs), s.ingress(t, 0, secs)
	t.Logf("the reserved pod alone: egress %.0f Mbit/s, ingress %.0f Mbit/s of a 1G uplink", aloneEgress/1e6, aloneIngress/1e6)

	// Limits: kubernetes.io/*-bandwidth: 100M, as the CNI bandwidth plugin reads it. A
	// slow machine reaches less; no machine may get more.
	cappedEgress, cappedIngress := s.egress(t, 4, secs), s.ingress(t, 4, secs)
	t.Logf("the pod capped at 100M: egress %.1f Mbit/s, ingress %.1f Mbit/s", cappedEgress/1e6, cappedIngress/1e6)
	for dir, got := range map[string]float64{"egress": cappedEgress, "ingress": cappedIngress} {
		if got > 105e6 {
			t.Errorf("the pod capped at 100M, %s: %.1f Mbit/s, want at most 100 (5%% for iperf3's own timing)", dir, got/1e6)
		}
	}
	// One line for scripts/bench-enforce.sh, rates in Mbit/s.
	fmt.Printf("bench-enforce-guarantees: required=%.0f contended_egress=%.1f contended_ingress=%.1f unenforced_egress=%.1f unenforced_ingress=%.1f alone_egress=%.1f alone_ingress=%.1f uplink=%.0f capped=100 capped_egress=%.1f capped_ingress=%.1f\n",
		required/1e6, onEgress/1e6, onIngress/1e6, offEgress/1e6, offIngress/1e6, aloneEgress/1e6, aloneIngress/1e6, uplinkRate/1e6, cappedEgress/1e6, cappedIngress/1e6)
}

// tcJSON runs tc -j with args in ns ("": the test's own) and decodes its output.
func tcJSON(t *testing.T, ns string, args ...string) []map[string]any {
	t.Helper()
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out := run(t, "tc", append([]string{"-j"}, args...)...)
	var v []map[string]any
	if strings.TrimSpace(out) == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("tc -j %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return v
}

// rootQdisc is up0's root qdisc as tc shows it, without its statistics.
func rootQdisc(t *testing.T, ns string) map[string]any {
	t.Helper()
	for _, q := range tcJSON(t, ns, "qdisc", "show", "dev", "up0", "root") {
		delete(q, "bytes")
		return q
	}
	return nil
}

// shaping is what the agent made on up0, counted: HTB classes by rate, root qdiscs,
// classifier filters per hook, ingress redirects, IFBs.
type shaping struct {
	classes              map[string]int // "rate/ceil" -> how many
	roots                int
	classifierIngress    int
	classifierEgress     int
	redirects, ifbs      int
	rootKind, rootHandle string
}

func shapingOf(t *testing.T, ns string) shaping {
	t.Helper()
	sh := shaping{classes: map[string]int{}}
	// tc has no JSON for classes: "class htb 5e47:3 parent 5e47:1 prio 0 rate 400Mbit ceil 950Mbit ...".
	for _, line := range strings.Split(run(t, "tc", "-n", ns, "class", "show", "dev", "up0"), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[1] != "htb" || f[3] != "parent" {
			continue
		}
		var rate, ceil string
		for i := 0; i+1 < len(f); i++ {
			switch f[i] {
			case "rate":
				rate = f[i+1]
			case "ceil":
				ceil = f[i+1]
			}
		}
		sh.classes[rate+"/"+ceil]++
	}
	for _, q := range tcJSON(t, ns, "qdisc", "show", "dev", "up0") {
		if q["root"] == true {
			sh.roots++
			sh.rootKind, sh.rootHandle = fmt.Sprint(q["kind"]), fmt.Sprint(q["handle"])
		}
	}
	for _, hook := range []string{"ingress", "egress"} {
		out, err := exec.Command("tc", "-n", ns, "filter", "show", "dev", "up0", hook).CombinedOutput()
		if err != nil {
			continue // no clsact qdisc
		}
		n := strings.Count(string(out), "sextant_classify_"+hook)
		if hook == "ingress" {
			sh.classifierIngress = n
			sh.redirects = strings.Count(string(out), "Egress Redirect to device sxifb")
		} else {
			sh.classifierEgress = n
		}
	}
	links, _ := exec.Command("ip", "-n", ns, "-o", "link", "show", "type", "ifb").Output()
	sh.ifbs = strings.Count(string(links), "sxifb")
	return sh
}

// TestEnforcementLifecycle: a pod's classes come when it starts and go when it ends; a
// pod placed past what the network can guarantee gets a Warning; the shaping stays in
// force through an agent restart, with nothing made twice; and turning enforcement off
// gives the uplink back exactly the root qdisc it had, with nothing of the agent's left.
func TestEnforcementLifecycle(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	s := newShapedNode(t, 2)
	node := readyFakeNode(t, "e2e-enforce-life-", nil, nil)
	ns := testNamespace(t)
	before := rootQdisc(t, s.node)
	stateDir := t.TempDir()
	agent := startEnforcingAgent(t, node, s, stateDir, true)
	waitGuaranteed(t, node.Name, 0, 0)

	started := time.Now()
	p0 := startShapedPod(t, ns, "reserved", node, s.pods[0].ip, map[string]string{annotations.EgressRequired: "400M", annotations.IngressRequired: "300M"})
	want := shaping{classes: map[string]int{"400Mbit/950Mbit": 1, "550Mbit/950Mbit": 1}, roots: 1, classifierIngress: 1, classifierEgress: 1,
		redirects: 1, ifbs: 1, rootKind: "htb", rootHandle: "5e47:"}
	eventually(t, 15*time.Second, func() (bool, string) {
		got := shapingOf(t, s.node)
		return reflect.DeepEqual(got, want), fmt.Sprintf("shaping %+v, want %+v", got, want)
	})
	t.Logf("the pod's egress class was there %v after the pod was marked running", time.Since(started).Round(time.Millisecond))
	waitGuaranteed(t, node.Name, 300e6, 400e6)

	// A pod placed past what the network can guarantee (902.5M each way here): a Warning
	// Event, not a silent shortfall.
	late := startShapedPod(t, ns, "late", node, s.pods[1].ip, map[string]string{annotations.EgressRequired: "600M"})
	eventually(t, 30*time.Second, func() (bool, string) {
		evs := podEvents(ns, late.Name)
		return strings.Contains(evs, "BandwidthNotGuaranteed") && strings.Contains(evs, "egress-required 600M is not guaranteed"), "events: " + evs
	})

	// The pod ends: its class goes.
	if err := local.kube.CoreV1().Pods(ns).Delete(context.Background(), p0.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	wantLate := want
	wantLate.classes = map[string]int{"600Mbit/950Mbit": 1, "350Mbit/950Mbit": 1}
	eventually(t, 15*time.Second, func() (bool, string) {
		got := shapingOf(t, s.node)
		return reflect.DeepEqual(got, wantLate), fmt.Sprintf("after the reserved pod ended: shaping %+v, want %+v (the late pod fits now)", got, wantLate)
	})

	// A restart: stopped, the agent leaves the shaping in force (outside a pod it is never
	// being uninstalled); started again, it takes it over and makes nothing twice.
	agent.stop()
	if got := shapingOf(t, s.node); !reflect.DeepEqual(got, wantLate) {
		t.Fatalf("with the agent stopped: shaping %+v, want it kept: %+v", got, wantLate)
	}
	restarted := startEnforcingAgent(t, node, s, stateDir, true)
	waitGuaranteed(t, node.Name, 0, 600e6)
	// Two resyncs of the new agent have passed once its write shows up.
	time.Sleep(5 * time.Second)
	if got := shapingOf(t, s.node); !reflect.DeepEqual(got, wantLate) {
		t.Fatalf("after the restart: shaping %+v, want the same as before: %+v", got, wantLate)
	}

	// Turning enforcement off gives up0 back its tbf, exactly.
	restarted.stop()
	off := startEnforcingAgent(t, node, s, stateDir, false)
	eventually(t, 30*time.Second, func() (bool, string) {
		got := shapingOf(t, s.node)
		root := rootQdisc(t, s.node)
		return got.ifbs == 0 && got.redirects == 0 && got.classifierEgress == 0 && got.classifierIngress == 0 && len(got.classes) == 0 && reflect.DeepEqual(root, before),
			fmt.Sprintf("after turning enforcement off: shaping %+v, root %v; want none of the agent's and the root %v", got, root, before)
	})
	// The agent writes its state after it gave the interface back: poll, as for the
	// qdiscs.
	eventually(t, 30*time.Second, func() (bool, string) {
		state, err := os.ReadFile(filepath.Join(stateDir, "enforcement.json"))
		return err == nil && !strings.Contains(string(state), "up0"), fmt.Sprintf("the state still names up0 (%v):\n%s", err, state)
	})
	eventually(t, 30*time.Second, func() (bool, string) {
		n := podNetwork(t, node.Name)
		return n != nil && len(n.Conditions) == 0 && n.Guarantees == nil, fmt.Sprintf("pod network %+v, want no enforcement condition", n)
	})
	off.stop()
}

// TestEnforcementRankerPlacesOnGuarantees runs the ranker and the enforcing agent
// together: the ranker reads from the node's NodeBandwidth that it keeps guarantees, and
// places pods by them (its decision says so on the pod); a pod whose required rate does
// not fit beside the guarantees already held waits though the uplink is idle, and is
// placed once one ends; the agent keeps what the ranker placed.
func TestEnforcementRankerPlacesOnGuarantees(t *testing.T) {
	installCRDs(t)
	deployChart(t)
	s := newShapedNode(t, 2)
	const prefix = "e2e-enforce-rank"
	node := readyFakeNode(t, prefix+"-", map[string]string{"sextant.io/e2e": prefix}, corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110"),
	})
	ns := testNamespace(t)
	startEnforcingAgent(t, node, s, t.TempDir(), true)
	waitGuaranteed(t, node.Name, 0, 0)
	startRanker(t, rankerOptions{scheduler: prefix, port: 10373, minWindow: 10 * time.Second})

	pods := local.kube.CoreV1().Pods(ns)
	create := func(name, required string) {
		t.Helper()
		p := bandwidthPod(ns, name, prefix, map[string]string{annotations.EgressRequired: required})
		if _, err := pods.Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
	}
	create("first", "600M")
	first := waitScheduled(t, ns, "first", 90*time.Second)
	if got := first.Annotations[annotations.BandwidthGuaranteed]; got != "true" {
		t.Fatalf("the pod placed on a node that enforces: %s=%q, want true", annotations.BandwidthGuaranteed, got)
	}
	// As its kubelet would: running, with the address of its namespace.
	first.Status.Phase = corev1.PodRunning
	first.Status.PodIP, first.Status.PodIPs = s.pods[0].ip, []corev1.PodIP{{IP: s.pods[0].ip}}
	if _, err := pods.UpdateStatus(context.Background(), first, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGuaranteed(t, node.Name, 0, 600e6)
	eventually(t, 15*time.Second, func() (bool, string) {
		got := shapingOf(t, s.node)
		return got.classes["600Mbit/950Mbit"] == 1, fmt.Sprintf("the placed pod's class: shaping %+v", got)
	})

	// 400M more would pass what the node measures (its uplink is idle) but not what it
	// guarantees (902.5M): the pod waits, and says why.
	create("second", "400M")
	eventually(t, 60*time.Second, func() (bool, string) {
		evs := podEvents(ns, "second")
		return strings.Contains(evs, "could not guarantee the pod's required egress bandwidth"), "events of the pod past the guarantees: " + evs
	})
	if p, err := pods.Get(context.Background(), "second", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("the pod past the guarantees was placed on %q (%v)", p.Spec.NodeName, err)
	}
	if err := pods.Delete(context.Background(), "first", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	second := waitScheduled(t, ns, "second", 60*time.Second)
	if second.Spec.NodeName != node.Name || second.Annotations[annotations.BandwidthGuaranteed] != "true" {
		t.Errorf("the waiting pod: node %q, %s=%q; want %s and true", second.Spec.NodeName, annotations.BandwidthGuaranteed,
			second.Annotations[annotations.BandwidthGuaranteed], node.Name)
	}
}

// TestEnforcementUninstallGivesInterfacesBack: the chart's agent keeps guarantees on the
// demo network (scripts/deploy.sh); helm uninstall deletes its DaemonSet, and the agent,
// stopping, finds it gone and gives the demo veth back exactly the root qdisc it had,
// with no IFB, filter or qdisc of its own left. The release is installed again after.
func TestEnforcementUninstallGivesInterfacesBack(t *testing.T) {
	requireRoot(t)
	installCRDs(t)
	deployChart(t)
	demoNetUp(t)
	// The tbf demo-net.sh puts on sxdemo0, as tc shows it, without statistics.
	root := func() map[string]any {
		for _, q := range tcJSON(t, "", "qdisc", "show", "dev", "sxdemo0", "root") {
			delete(q, "bytes")
			return q
		}
		return nil
	}
	agentThings := func() string {
		var found []string
		if links, _ := exec.Command("ip", "-o", "link", "show", "type", "ifb").Output(); strings.Contains(string(links), "sxifb") {
			found = append(found, "an IFB")
		}
		for _, hook := range []string{"ingress", "egress"} {
			out, _ := exec.Command("tc", "filter", "show", "dev", "sxdemo0", hook).CombinedOutput()
			if strings.Contains(string(out), "sextant_classify") || strings.Contains(string(out), "mirred") {
				found = append(found, hook+" filters")
			}
		}
		return strings.Join(found, ", ")
	}
	eventually(t, 3*time.Minute, func() (bool, string) {
		q := root()
		return q["kind"] == "htb" && agentThings() == "an IFB, ingress filters, egress filters",
			fmt.Sprintf("the chart's agent has not shaped sxdemo0: root %v, %s", q, agentThings())
	})
	t.Cleanup(func() {
		// The rest of the suite runs against the release.
		if out, err := exec.Command(filepath.Join(repoRoot(t), "scripts", "deploy.sh")).CombinedOutput(); err != nil {
			t.Errorf("installing the release again: %v\n%s", err, lastLines(string(out), 20))
		}
	})
	kubeconfig := os.Getenv("KUBECONFIG")
	cmd := exec.Command("go", "tool", "helm", "uninstall", "sextant", "--namespace", releaseNamespace, "--kubeconfig", kubeconfig, "--wait", "--timeout", "3m")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	// demo-net.sh's tbf: 200 Mbit/s is 25e6 bytes/s to tc.
	eventually(t, 90*time.Second, func() (bool, string) {
		q := root()
		opts, _ := q["options"].(map[string]any)
		left := agentThings()
		return q["kind"] == "tbf" && opts["rate"] == float64(25e6) && left == "", fmt.Sprintf("after the uninstall: root %v, left behind: %q", q, left)
	})
}
