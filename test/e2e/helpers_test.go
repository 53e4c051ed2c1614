//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	sextantv1 "sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/internal/fakenode"
	"sextant.io/sextant/internal/netnstest"
)

const releaseNamespace = "sextant-system"

var (
	deployOnce sync.Once
	deployErr  error
)

// deployChart installs the chart with the images of this tree (scripts/deploy.sh) once
// per run.
func deployChart(t *testing.T) {
	t.Helper()
	deployOnce.Do(func() {
		cmd := exec.Command(filepath.Join(repoRoot(t), "scripts", "deploy.sh"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			deployErr = fmt.Errorf("scripts/deploy.sh: %w\n%s", err, out)
		}
	})
	if deployErr != nil {
		t.Fatal(deployErr)
	}
}

var (
	binariesMu sync.Mutex
	binaries   = map[string]string{}
	// binariesDir holds what goBinary built in this run; removeBinaries removes it.
	binariesDir string
)

// goBinary builds a command of this module (e.g. "./agent/cmd/sextant-agent") once per
// run and returns its path.
func goBinary(t *testing.T, pkg string) string {
	t.Helper()
	binariesMu.Lock()
	defer binariesMu.Unlock()
	if path, ok := binaries[pkg]; ok {
		return path
	}
	if binariesDir == "" {
		dir, err := os.MkdirTemp("", "sextant-e2e-bin-")
		if err != nil {
			t.Fatal(err)
		}
		binariesDir = dir
	}
	path := filepath.Join(binariesDir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", path, pkg)
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	binaries[pkg] = path
	return path
}

// removeBinaries removes what goBinary built. Each binary is tens of megabytes, and a
// developer's repeated runs would otherwise fill the temporary directory.
func removeBinaries() {
	binariesMu.Lock()
	defer binariesMu.Unlock()
	if binariesDir != "" {
		_ = os.RemoveAll(binariesDir)
	}
}

func agentBinary(t *testing.T) string { return goBinary(t, "./agent/cmd/sextant-agent") }

func sidecarsBinary(t *testing.T) string { return goBinary(t, "./sidecars/cmd/sextant-sidecars") }

// nodeInternalIP is the InternalIP of the named node.
func nodeInternalIP(t *testing.T, name string) string {
	t.Helper()
	node, err := local.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatalf("node %s has no InternalIP", name)
	return ""
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the service
// account, so a process run by the test has exactly the chart's RBAC.
func serviceAccountKubeconfig(t *testing.T, namespace, name string) string {
	t.Helper()
	return tokenKubeconfig(t, namespace, name, authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)})
}

// agentKubeconfig writes a kubeconfig for the chart's agent account with a token bound
// to the node, whose node claim the chart's policies (agent-policy.yaml) key the agent's
// writes on, as they do the token the kubelet mounts into an agent pod on that node.
func agentKubeconfig(t *testing.T, node string) string {
	t.Helper()
	return tokenKubeconfig(t, releaseNamespace, "sextant-agent", authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node},
	})
}

func tokenKubeconfig(t *testing.T, namespace, name string, spec authenticationv1.TokenRequestSpec) string {
	t.Helper()
	tok, err := local.kube.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, name, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: local.config.Host, CertificateAuthority: local.config.CAFile, CertificateAuthorityData: local.config.CAData}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	cfg.CurrentContext = "local"
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// demoNetUp brings up the demo veth sxdemo0 (scripts/demo-net.sh), which the chart's
// agent meters with a known capacity and shapes (scripts/deploy.sh), until the test ends.
func demoNetUp(t *testing.T) {
	t.Helper()
	demoNet := filepath.Join(repoRoot(t), "scripts", "demo-net.sh")
	run(t, demoNet, "up")
	t.Cleanup(func() { _ = exec.Command(demoNet, "down").Run() })
}

// fakeNode creates a Node object with no kubelet behind it, deleted when the test ends.
// It is labelled so that the chart's agent DaemonSet leaves it alone: its agent, if any,
// is a process the test runs.
func fakeNode(t *testing.T, prefix string) *corev1.Node {
	t.Helper()
	node, err := local.kube.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Labels: map[string]string{"sextant.io/agent": "none"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	t.Cleanup(func() {
		_ = local.kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	})
	return node
}

// readyFakeNode is a fakeNode with extra labels and the given allocatable resources that
// stays Ready while the test runs (internal/fakenode posts Ready and renews its Lease), so
// the node lifecycle controller (grace period 20s on the local cluster) never taints it
// unreachable under a test that schedules onto it.
func readyFakeNode(t *testing.T, prefix string, labels map[string]string, allocatable corev1.ResourceList) *corev1.Node {
	t.Helper()
	all := map[string]string{"sextant.io/agent": "none"}
	maps.Copy(all, labels)
	node, err := fakenode.Create(context.Background(), local.kube, metav1.ObjectMeta{GenerateName: prefix, Labels: all}, allocatable)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fakenode.Keep(ctx, local.kube, node) }()
	t.Cleanup(func() {
		stop()
		<-done
		_ = local.kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	})
	return node
}

// waitPodPhase waits until the pod has finished (Succeeded or Failed) and fails the test
// unless it reached want.
func waitPodPhase(t *testing.T, ns, name string, want corev1.PodPhase, timeout time.Duration) {
	t.Helper()
	var phase corev1.PodPhase
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := local.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	if err != nil || phase != want {
		t.Fatalf("pod %s/%s phase %q, want %s (err %v)", ns, name, phase, want, err)
	}
}

// eventually polls cond until it holds or timeout passes, then fails the test with the
// last description cond gave. Every wait on state that arrives asynchronously (events,
// statuses, marks another process writes) goes through a poll like this one.
func eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		var ok bool
		ok, last = cond()
		return ok, nil
	})
	if err != nil {
		t.Fatalf("after %v: %s", timeout, last)
	}
}

// process is a command the test started and stops when it ends.
type process struct {
	cmd *exec.Cmd
	out *bytes.Buffer
	mu  sync.Mutex
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// stop sends SIGINT and waits for the process to exit.
func (p *process) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func startProcess(t *testing.T, name string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(name, args...), out: &bytes.Buffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("output of %s:\n%s", filepath.Base(name), lastLines(p.output(), 40))
		}
	})
	return p
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// run runs a command and fails the test with its output if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// vethPair makes two network namespaces joined by a veth (ns A has 10.250.<n>.1 on
// "veth-a", ns B 10.250.<n>.2 on "veth-b"), both ends shaped to rate with tbf. Traffic
// between them never leaves the namespaces. Everything is removed when the test ends.
type vethPair struct {
	nsA, nsB string
	ipB      string
}

func newVethPair(t *testing.T, n int, rate string) *vethPair {
	t.Helper()
	for _, tool := range []string{"ip", "tc", "iperf3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/deps.sh installs it)", tool)
		}
	}
	suffix := fmt.Sprintf("%d-%d", os.Getpid(), n)
	v := &vethPair{nsA: "e2e-a-" + suffix, nsB: "e2e-b-" + suffix, ipB: fmt.Sprintf("10.250.%d.2", n)}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "delete", v.nsA).Run()
		_ = exec.Command("ip", "netns", "delete", v.nsB).Run()
	})
	run(t, "ip", "netns", "add", v.nsA)
	run(t, "ip", "netns", "add", v.nsB)
	run(t, "ip", "-n", v.nsA, "link", "add", "veth-a", "type", "veth", "peer", "name", "veth-b", "netns", v.nsB)
	run(t, "ip", "-n", v.nsA, "addr", "add", fmt.Sprintf("10.250.%d.1/24", n), "dev", "veth-a")
	run(t, "ip", "-n", v.nsB, "addr", "add", v.ipB+"/24", "dev", "veth-b")
	for _, ns := range []struct{ ns, dev string }{{v.nsA, "veth-a"}, {v.nsB, "veth-b"}} {
		run(t, "ip", "-n", ns.ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", ns.ns, "link", "set", ns.dev, "up")
		run(t, "ip", "netns", "exec", ns.ns, "tc", "qdisc", "add", "dev", ns.dev, "root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms")
	}
	// An iperf3 server in B for the test's traffic.
	startProcess(t, "ip", "netns", "exec", v.nsB, "iperf3", "-s", "-B", v.ipB)
	netnstest.WaitListening(t, v.nsB, 5201)
	return v
}

// traffic pushes TCP from A to B (egress of veth-a) for d, or from B to A when reverse.
func (v *vethPair) traffic(t *testing.T, d time.Duration, reverse bool) {
	t.Helper()
	args := []string{"netns", "exec", v.nsA, "iperf3", "-c", v.ipB, "-t", fmt.Sprint(int(d.Seconds())), "-J"}
	if reverse {
		args = append(args, "-R")
	}
	run(t, "ip", args...)
}

func getNodeBandwidth(ctx context.Context, name string) (*sextantv1.NodeBandwidth, error) {
	u, err := local.dynamic.Resource(nodeBandwidthGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var nbw sextantv1.NodeBandwidth
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nbw); err != nil {
		return nil, err
	}
	return &nbw, nil
}

func getNodeTopology(ctx context.Context, name string) (*sextantv1.NodeTopology, error) {
	u, err := local.dynamic.Resource(nodeTopologyGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var nt sextantv1.NodeTopology
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nt); err != nil {
		return nil, err
	}
	return &nt, nil
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and eBPF")
	}
}
