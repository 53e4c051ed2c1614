//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"sextant.io/sextant/agent/cgroups"
	"sextant.io/sextant/agent/deviceplugin"
	"sextant.io/sextant/agent/podresources"
	"sextant.io/sextant/agent/topology"
	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// splitNUMATree writes a sysfs/procfs tree that splits this machine's online CPUs over
// two NUMA nodes: node 0 the first half with all the memory, node 1 the rest without
// memory (the real machine has one NUMA node, so pinning memory to a node 1 it lacks
// could not work), with two accelerators on each (accelerators: PCI address -> NUMA
// node). The agent reads the topology from it; it pins on the real cgroups.
func splitNUMATree(t *testing.T) (root string, nodes, accelerators map[string]string) {
	t.Helper()
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Fatal(err)
	}
	cpus, err := topology.ParseCPUList(string(online))
	if err != nil || len(cpus) < 2 {
		t.Skipf("needs at least 2 online CPUs to split over two NUMA nodes (online: %q)", online)
	}
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	memKB := strings.Fields(strings.SplitN(string(meminfo), "\n", 2)[0])[1]
	root = t.TempDir()
	accelerators = map[string]string{}
	half := len(cpus) / 2
	nodes = map[string]string{"0": topology.FormatCPUList(cpus[:half]), "1": topology.FormatCPUList(cpus[half:])}
	files := map[string]string{
		"sys/devices/system/cpu/online":          string(online),
		"sys/devices/system/node/node0/cpulist":  nodes["0"] + "\n",
		"sys/devices/system/node/node0/meminfo":  "Node 0 MemTotal:       " + memKB + " kB\n",
		"sys/devices/system/node/node0/distance": "10 20\n",
		"sys/devices/system/node/node1/cpulist":  nodes["1"] + "\n",
		"sys/devices/system/node/node1/meminfo":  "Node 1 MemTotal:       0 kB\n",
		"sys/devices/system/node/node1/distance": "20 10\n",
		"proc/meminfo":                           string(meminfo),
	}
	// Two accelerators (processing accelerators, class 0x1200) on each NUMA node.
	for i, numa := range []string{"0", "0", "1", "1"} {
		addr := fmt.Sprintf("0000:%02x:00.0", 0x3b+i)
		dir := "sys/devices/pci0000:00/" + addr
		files[dir+"/class"] = "0x120000\n"
		files[dir+"/vendor"] = "0x1d0f\n"
		files[dir+"/device"] = "0xcd01\n"
		files[dir+"/numa_node"] = numa + "\n"
		accelerators[addr] = numa
	}
	for rel, content := range files {
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	devices := filepath.Join(root, "sys/bus/pci/devices")
	if err := os.MkdirAll(devices, 0o755); err != nil {
		t.Fatal(err)
	}
	for addr := range accelerators {
		if err := os.Symlink("../../../devices/pci0000:00/"+addr, filepath.Join(devices, addr)); err != nil {
			t.Fatal(err)
		}
		// Bound to a driver: the agent counts a device without one as disabled once it
		// was published before (an earlier test's tree) and has vanished since.
		if err := os.Symlink("../../../bus/pci/drivers/sextant-e2e", filepath.Join(root, "sys/devices/pci0000:00", addr, "driver")); err != nil {
			t.Fatal(err)
		}
	}
	return root, nodes, accelerators
}

// takeOverLocalAgent keeps the chart's agent off the local node for the rest of the
// test (its affinity leaves out nodes labelled sextant.io/agent=none), so the test's
// own agent is the only one that pins and publishes there; the label goes when the
// test ends, and the chart's agent comes back.
func takeOverLocalAgent(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	label := func(value string) {
		t.Helper()
		patch := `{"metadata":{"labels":{"sextant.io/agent":null}}}`
		if value != "" {
			patch = fmt.Sprintf(`{"metadata":{"labels":{"sextant.io/agent":%q}}}`, value)
		}
		if _, err := local.kube.CoreV1().Nodes().Patch(ctx, local.nodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agentPods := func() ([]corev1.Pod, error) {
		list, err := local.kube.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + local.nodeName,
		})
		if err != nil {
			return nil, err
		}
		return list.Items, nil
	}
	label("none")
	t.Cleanup(func() {
		label("")
		eventually(t, 3*time.Minute, func() (bool, string) {
			pods, err := agentPods()
			if err != nil || len(pods) != 1 {
				return false, fmt.Sprintf("the chart's agent is not back on %s: %d pods, %v", local.nodeName, len(pods), err)
			}
			for _, c := range pods[0].Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return true, ""
				}
			}
			return false, "the chart's agent is back but not Ready"
		})
	})
	eventually(t, 2*time.Minute, func() (bool, string) {
		pods, err := agentPods()
		return err == nil && len(pods) == 0, fmt.Sprintf("the chart's agent still runs on %s (%d pods, %v)", local.nodeName, len(pods), err)
	})
}

func podResourcesSocket(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(filepath.Dir(filepath.Dir(containerdSocket(t))), "kubelet", "root", "pod-resources", "kubelet.sock")
	if _, err := os.Stat(sock); err != nil {
		t.Skipf("no PodResources socket of the local kubelet at %s: %v", sock, err)
	}
	return sock
}

// numaAgent runs sextant-agent for the local node on the split tree.
type numaAgent struct {
	t    *testing.T
	args []string
	// metrics is the agent's --metrics-addr; token may read its /metrics.
	metrics string
	token   string
	proc    *process
}

func (a *numaAgent) start() {
	a.t.Helper()
	a.proc = startProcess(a.t, agentBinary(a.t), a.args...)
	waitForOutput(a.t, a.proc, `"msg":"pinning pods to their NUMA nodes"`, 30*time.Second)
	eventually(a.t, 30*time.Second, func() (bool, string) {
		code, body, err := agentGet(a.metrics, "/readyz", "")
		return code == http.StatusOK, fmt.Sprintf("the agent is not ready: HTTP %d, %v: %s", code, err, body)
	})
}

func (a *numaAgent) stop() { a.proc.stop() }

// counter reads one sample of the agent's metrics, 0 if absent.
func (a *numaAgent) counter(series string) float64 {
	a.t.Helper()
	sc := bufio.NewScanner(strings.NewReader(agentMetrics(a.t, a.metrics, a.token)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			var f float64
			_, _ = fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

// allowed is what a container printed of /proc/self/status, one entry a print.
type allowed struct{ cpus, mems string }

const printAllowed = `grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status`

// allowedLog reads the Cpus_allowed_list/Mems_allowed_list pairs a container printed.
func allowedLog(t *testing.T, ns, pod, container string) []allowed {
	t.Helper()
	logs, err := local.kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	if err != nil {
		return nil
	}
	var out []allowed
	for _, l := range strings.Split(string(logs), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			out = append(out, allowed{cpus: strings.TrimSpace(v)})
		}
		if v, ok := strings.CutPrefix(l, "Mems_allowed_list:"); ok && len(out) > 0 {
			out[len(out)-1].mems = strings.TrimSpace(v)
		}
	}
	return out
}

// numaHarness is the local node taken over by a test's agent that reads the split
// two-NUMA tree, and a ranker of the test's own scheduler name.
type numaHarness struct {
	t         *testing.T
	ns        string
	scheduler string
	agent     *numaAgent
	numaCPUs  map[string]string // NUMA node ID -> its CPUs in the split tree
	// accelerators are the split tree's accelerators: PCI address -> NUMA node ID.
	accelerators map[string]string
	// sysfsRoot is the split tree the agent reads.
	sysfsRoot string
	allCPUs   string
}

func newNUMAHarness(t *testing.T) *numaHarness {
	t.Helper()
	return newNUMAHarnessWith(t, numaHarnessOptions{})
}

// numaHarnessOptions change what newNUMAHarnessWith's agent reads and runs.
type numaHarnessOptions struct {
	// tree, if set, adds to the split tree before the agent starts.
	tree func(root string)
	// agentArgs are added to the agent's flags.
	agentArgs []string
}

func newNUMAHarnessWith(t *testing.T, o numaHarnessOptions) *numaHarness {
	t.Helper()
	requireRoot(t)
	installCRDs(t)
	deployChart(t)
	root, numaCPUs, accelerators := splitNUMATree(t)
	if o.tree != nil {
		o.tree(root)
	}
	sock := containerdSocket(t)
	prSock := podResourcesSocket(t)
	online, _ := os.ReadFile("/sys/devices/system/cpu/online")
	h := &numaHarness{t: t, numaCPUs: numaCPUs, accelerators: accelerators, sysfsRoot: root, allCPUs: strings.TrimSpace(string(online))}

	takeOverLocalAgent(t)
	pair := newVethPair(t, 7, "1gbit")
	const metricsAddr = "127.0.0.1:19464"
	h.agent = &numaAgent{t: t, metrics: metricsAddr, args: []string{"run", "--logging-format=json",
		"--kubeconfig", agentKubeconfig(t, local.nodeName),
		"--node-name", local.nodeName, "--metrics-addr", metricsAddr,
		"--sysfs-root", root, "--topology-interval", "1s", "--numa-resync", "2s",
		"--cri-endpoint", "unix://" + sock, "--pod-resources-socket", prSock, "--sidecar-terminator=false",
		// The device plugin serves the tree's accelerators to the real kubelet, whose
		// device-plugins directory is /var/lib/kubelet/device-plugins whatever its root.
		"--device-plugin-dir", pluginapi.DevicePluginPath, "--device-audit-interval", "2s",
		"--netns", "/var/run/netns/" + pair.nsA, "--interfaces", "veth-a", "--nic-capacity", "veth-a=1G"}}
	h.agent.args = append(h.agent.args, o.agentArgs...)
	h.agent.start()
	h.agent.token = metricsReader(t, metricsAddr)
	eventually(t, time.Minute, func() (bool, string) {
		nt, err := getNodeTopology(context.Background(), local.nodeName)
		if err != nil {
			return false, err.Error()
		}
		// The agent pins once the kubelet has said it does not run the static CPU
		// manager policy, and says so in the NodeTopology.
		return len(nt.Status.NUMANodes) == 2 && nt.Status.NUMAPinning == v1alpha1.PinningActive,
			fmt.Sprintf("NodeTopology of %s: %d NUMA nodes, numaPinning %q; want the split tree's 2, Active", local.nodeName, len(nt.Status.NUMANodes), nt.Status.NUMAPinning)
	})
	h.ns = testNamespace(t)
	h.scheduler = "numa" + strings.TrimPrefix(h.ns, "e2e-")
	startRanker(t, rankerOptions{scheduler: h.scheduler, port: 10390})
	return h
}

// loop prints the container's allowed CPUs and memory nodes as its first command, then
// every second.
const loop = printAllowed + `; while sleep 1; do ` + printAllowed + `; done`

func (h *numaHarness) container(name, script string) corev1.Container {
	return corev1.Container{Name: name, Image: busyboxImage, ImagePullPolicy: corev1.PullNever,
		Command: []string{"sh", "-c", script},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("4Mi")}}}
}

// pod is a single-numa-node pod for the ranker, of the given containers.
func (h *numaHarness) pod(name string, init []corev1.Container, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns,
			Annotations: map[string]string{annotations.NUMAPolicy: string(annotations.PolicySingleNUMANode)}},
		Spec: corev1.PodSpec{
			SchedulerName: h.scheduler, NodeSelector: map[string]string{"sextant.io/local": "true"},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			InitContainers:                init,
			Containers:                    containers,
		},
	}
}

func (h *numaHarness) create(p *corev1.Pod) {
	h.t.Helper()
	if _, err := local.kube.CoreV1().Pods(h.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// want returns the CPUs of the NUMA node the ranker chose for the pod.
func (h *numaHarness) want(name string) string {
	h.t.Helper()
	p := waitScheduled(h.t, h.ns, name, 2*time.Minute)
	if p.Spec.NodeName != local.nodeName {
		h.t.Fatalf("%s bound to %s, want %s", name, p.Spec.NodeName, local.nodeName)
	}
	v := p.Annotations[annotations.NUMANodes]
	cpus, ok := h.numaCPUs[v]
	if !ok {
		h.t.Fatalf("%s: %s = %q, want one NUMA node of the split tree", name, annotations.NUMANodes, v)
	}
	return cpus
}

// prints waits for a container to have printed at least n times and returns them.
func (h *numaHarness) prints(name, ctr string, n int) []allowed {
	h.t.Helper()
	var got []allowed
	eventually(h.t, 3*time.Minute, func() (bool, string) {
		got = allowedLog(h.t, h.ns, name, ctr)
		return len(got) >= n, fmt.Sprintf("%s/%s printed %d times, want %d", name, ctr, len(got), n)
	})
	return got
}

// checkFirst: the container's first print shows its NUMA node's CPUs and node 0's
// memory (node 1 has none: its CPUs take memory from the nearest node).
func (h *numaHarness) checkFirst(name, ctr, cpus string) {
	h.t.Helper()
	if first := h.prints(name, ctr, 1)[0]; first.cpus != cpus || first.mems != "0" {
		h.t.Errorf("%s/%s first ran on CPUs %q memory %q, want CPUs %q memory 0", name, ctr, first.cpus, first.mems, cpus)
	}
}

// checkNow: the container's latest print, taken after at least two more, shows cpus.
func (h *numaHarness) checkNow(name, ctr, cpus, when string) {
	h.t.Helper()
	n := len(allowedLog(h.t, h.ns, name, ctr))
	got := h.prints(name, ctr, n+2)
	if last := got[len(got)-1]; last.cpus != cpus {
		h.t.Errorf("%s: %s/%s runs on CPUs %q, want %q", when, name, ctr, last.cpus, cpus)
	}
}

// TestNUMAPinning: on the real node, with the agent reading a topology that splits the
// CPUs over two NUMA nodes, a single-numa-node pod placed by the ranker runs on its NUMA
// node's CPUs from its first instruction, in its main container, its native sidecar
// and a container the kubelet restarts; it stays so across an agent restart, an
// in-place resize and a kubelet restart; a pod that started while the agent was down
// is caught up, and one narrowed to another set by hand meanwhile is repaired; a pod
// without the annotation keeps every CPU.
func TestNUMAPinning(t *testing.T) {
	h := newNUMAHarness(t)
	ctx := context.Background()
	ns := h.ns
	numaPod := func(name string) *corev1.Pod {
		side := h.container("side", loop)
		side.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		return h.pod(name, []corev1.Container{side}, h.container("main", loop),
			// Exits after its first print: the kubelet restarts it.
			h.container("restarts", printAllowed+"; sleep 2; exit 1"))
	}

	h.create(numaPod("pinned"))
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"sextant.io/local": "true"}, TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{h.container("main", loop)}}}
	h.create(plain)
	cpus := h.want("pinned")
	t.Logf("pinned: NUMA node CPUs %s of %s", cpus, h.allCPUs)
	for _, c := range []string{"side", "main", "restarts"} {
		h.checkFirst("pinned", c, cpus)
	}
	eventually(t, 2*time.Minute, func() (bool, string) {
		p, err := local.kube.CoreV1().Pods(ns).Get(ctx, "pinned", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := statusOf(p, "restarts")
		return s != nil && s.RestartCount >= 1, "the kubelet has not restarted container restarts yet"
	})
	// The restarted container's own log is the new attempt's.
	h.checkFirst("pinned", "restarts", cpus)
	if got := h.prints("plain", "main", 1)[0]; got.cpus != h.allCPUs {
		t.Errorf("a pod without the annotation runs on CPUs %q, want all (%s)", got.cpus, h.allCPUs)
	}
	// Pinned before any container of the pod existed: from the first instruction.
	pinnedEvent(t, ns, "pinned", "pod-cgroup")

	// The agent restarts; a pod starts while it is down, and someone else narrows the
	// pinned pod's cgroup to the other NUMA node's CPUs.
	h.agent.stop()
	h.create(numaPod("during"))
	duringCPUs := h.want("during")
	h.prints("during", "main", 1)
	var otherCPUs string
	for _, c := range h.numaCPUs {
		if c != cpus {
			otherCPUs = c
		}
	}
	narrowByHand(t, ns, "pinned", cgroups.Cpuset{CPUs: mustCPUs(t, otherCPUs), Mems: []int32{0}})
	h.checkNow("pinned", "main", otherCPUs, "narrowed by hand while the agent was down")
	h.agent.start()
	pinnedEvent(t, ns, "during", "catch-up")
	for _, c := range []string{"side", "main"} {
		h.checkNow("during", c, duringCPUs, "caught up after the agent restart")
		h.checkNow("pinned", c, cpus, "repaired after the agent restart")
	}
	checkContainerCgroups(t, ns, "pinned", cpus)
	eventually(t, time.Minute, func() (bool, string) {
		list, err := local.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=NUMAPinRepaired"})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 1 && list.Items[0].InvolvedObject.Name == "pinned", fmt.Sprintf("NUMAPinRepaired events %d, want one, on pinned", len(list.Items))
	})
	if n := h.agent.counter(`sextant_numa_pins_total{path="repair"}`); n != 1 {
		t.Errorf("the restarted agent counted %v repairs, want 1: the pinned pod's cgroup narrowed by hand", n)
	}
	if n := h.agent.counter(`sextant_numa_pins_total{path="pod-cgroup"}`); n != 0 {
		t.Errorf("the restarted agent counted %v pod-cgroup pins; no pod was new", n)
	}
	if n := h.agent.counter(`sextant_numa_runtime_updates_total{result="updated"}`); n < 2 {
		t.Errorf("runtime updates %v, want the caught-up pod's running containers told through CRI", n)
	}

	// An in-place resize, down from 5m (a pinned pod may not grow in place: the policy
	// sextant-numa-resize): the kubelet's own UpdateContainerResources must not undo the
	// pin.
	patch := `{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"2m"}}}]}}`
	if _, err := local.kube.CoreV1().Pods(ns).Patch(ctx, "during", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("resize: %v", err)
	}
	eventually(t, time.Minute, func() (bool, string) {
		p, err := local.kube.CoreV1().Pods(ns).Get(ctx, "during", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := statusOf(p, "main")
		if s == nil || s.Resources == nil {
			return false, "no resources in main's status yet"
		}
		got := s.Resources.Requests.Cpu().String()
		return got == "2m", fmt.Sprintf("resize not applied: main requests %s", got)
	})
	h.checkNow("during", "main", duringCPUs, "after an in-place resize")
	checkContainerCgroups(t, ns, "during", duringCPUs)

	// A kubelet restart.
	out, err := exec.Command(filepath.Join(repoRoot(t), "scripts", "cluster.sh"), "restart-kubelet").CombinedOutput()
	if err != nil {
		t.Fatalf("restart the kubelet: %v\n%s", err, out)
	}
	for name, want := range map[string]string{"pinned": cpus, "during": duringCPUs} {
		h.checkNow(name, "main", want, "after a kubelet restart")
		checkContainerCgroups(t, ns, name, want)
	}
	if n := h.agent.counter(`sextant_numa_pins_total{path="repair"}`); n != 1 {
		t.Errorf("%v repairs, want the one after the agent restart: the kubelet widened a pinned pod", n)
	}
	events, err := local.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=NUMAPinned"})
	if err != nil || len(events.Items) != 2 {
		t.Errorf("NUMAPinned events: %d (%v), want one for each pinned pod", len(events.Items), err)
	}
}

// pinnedEvent waits for the agent's NUMAPinned event on the pod and checks the path it
// names.
func pinnedEvent(t *testing.T, ns, pod, path string) {
	t.Helper()
	var msg string
	eventually(t, time.Minute, func() (bool, string) {
		list, err := local.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "reason=NUMAPinned,involvedObject.name=" + pod})
		if err != nil || len(list.Items) == 0 {
			return false, fmt.Sprintf("no NUMAPinned event on %s (%v)", pod, err)
		}
		msg = list.Items[0].Message
		return true, ""
	})
	if !strings.Contains(msg, "("+path+",") {
		t.Errorf("%s: NUMAPinned %q, want path %s", pod, msg, path)
	}
	t.Logf("%s: %s", pod, msg)
}

// checkContainerCgroups reads the cpuset the kernel enforces on every cgroup of the
// pod: the pod's and each of its containers'.
func checkContainerCgroups(t *testing.T, ns, name, cpus string) {
	t.Helper()
	p, err := local.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/cpuset/kubepods/*/pod"+string(p.UID), "*", "cpuset.effective_cpus"))
	pod, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/cpuset/kubepods/*/pod"+string(p.UID), "cpuset.effective_cpus"))
	if len(dirs) == 0 || len(pod) != 1 {
		t.Skipf("no cgroup v1 cpuset cgroups of pod %s found (%v, %v)", name, dirs, pod)
	}
	for _, f := range append(pod, dirs...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a container that exited meanwhile
		}
		if got := strings.TrimSpace(string(b)); got != cpus {
			t.Errorf("%s holds CPUs %s, want %s", f, got, cpus)
		}
	}
}

// narrowByHand narrows a running pod's v1 cpuset cgroups to cs as another writer on the
// node would: the pod cgroup to both sets, its containers', then the pod cgroup's.
func narrowByHand(t *testing.T, ns, name string, cs cgroups.Cpuset) {
	t.Helper()
	p, err := local.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, _ := filepath.Glob("/sys/fs/cgroup/cpuset/kubepods/*/pod" + string(p.UID))
	if len(pod) != 1 {
		t.Skipf("no cgroup v1 cpuset cgroup of pod %s found (%v)", name, pod)
	}
	h, err := cgroups.DetectHierarchy("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Narrow(pod[0], cs); err != nil {
		t.Fatalf("narrow pod %s by hand: %v", name, err)
	}
}

// pinLog is what the agent logged of each pin: its path and the seconds from the pod
// being seen bound to the pin, by pod name.
func (a *numaAgent) pinLog() map[string]struct {
	path    string
	seconds float64
} {
	out := map[string]struct {
		path    string
		seconds float64
	}{}
	for _, line := range strings.Split(a.proc.output(), "\n") {
		var l struct {
			Msg     string  `json:"msg"`
			Pod     string  `json:"pod"`
			Path    string  `json:"path"`
			Seconds float64 `json:"seconds"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "pinned a pod to its NUMA nodes" {
			continue
		}
		_, name, _ := strings.Cut(l.Pod, "/")
		out[name] = struct {
			path    string
			seconds float64
		}{l.Path, l.Seconds}
	}
	return out
}

// TestNUMABench is `make bench-numa`: 50 single-numa-node pods placed by the ranker on
// the real node at once, then 50 more started while the agent was down. It prints the
// share pinned from the first instruction (the pod's cgroup narrowed before any of its
// containers existed, and the container's first print showing its NUMA node's CPUs;
// goal 100%) and p50/p99 of the pin latency per path (goal for catch-up: p99 <= 100 ms).
func TestNUMABench(t *testing.T) {
	if os.Getenv("SEXTANT_BENCH_NUMA") == "" {
		t.Skip("a benchmark: run it with `make bench-numa`")
	}
	const pods = 50
	h := newNUMAHarness(t)
	ctx := context.Background()
	batch := func(prefix string) []string {
		var names []string
		for i := range pods {
			name := fmt.Sprintf("%s-%02d", prefix, i)
			h.create(h.pod(name, nil, h.container("main", printAllowed+"; exec sleep 3600")))
			names = append(names, name)
		}
		return names
	}
	pct := func(xs []float64, p float64) time.Duration {
		sort.Float64s(xs)
		i := int(float64(len(xs))*p+0.999999) - 1 // nearest rank
		return time.Duration(xs[max(0, min(i, len(xs)-1))] * float64(time.Second)).Round(100 * time.Microsecond)
	}

	// Placed while the agent runs: every pod should take the pod-cgroup path.
	start := time.Now()
	first := batch("first")
	fromFirst := 0
	for _, name := range first {
		cpus := h.want(name)
		if got := h.prints(name, "main", 1)[0]; got.cpus == cpus && got.mems == "0" {
			fromFirst++ // confirmed below by the path
		}
	}
	var pins map[string]struct {
		path    string
		seconds float64
	}
	eventually(t, time.Minute, func() (bool, string) {
		pins = h.agent.pinLog()
		return len(pins) >= pods, fmt.Sprintf("the agent logged %d pins, want %d", len(pins), pods)
	})
	var early []float64
	notEarly := 0
	for _, name := range first {
		if p := pins[name]; p.path == "pod-cgroup" {
			early = append(early, p.seconds)
		} else {
			notEarly++
		}
	}
	fromFirst = min(fromFirst, len(early))
	t.Logf("first batch of %d running %v after creation", pods, time.Since(start).Round(time.Second))

	// Make room, then start 50 pods while the agent is down: all must be caught up.
	if err := local.kube.CoreV1().Pods(h.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, func() (bool, string) {
		list, err := local.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, fmt.Sprintf("%d pods of the first batch left", len(list.Items))
	})
	h.agent.stop()
	late := batch("late")
	for _, name := range late {
		h.want(name)
		h.prints(name, "main", 1)
	}
	h.agent.start()
	eventually(t, time.Minute, func() (bool, string) {
		pins = h.agent.pinLog()
		return len(pins) >= pods, fmt.Sprintf("the restarted agent logged %d pins, want %d", len(pins), pods)
	})
	var catchUp []float64
	for _, name := range late {
		if p := pins[name]; p.path == "catch-up" {
			catchUp = append(catchUp, p.seconds)
		}
	}
	for _, name := range late {
		checkContainerCgroups(t, h.ns, name, h.want(name))
	}
	if len(early) == 0 || len(catchUp) == 0 {
		t.Fatalf("pins by path: %d pod-cgroup of the first batch, %d catch-up of the second", len(early), len(catchUp))
	}

	share := float64(fromFirst) / pods
	verdict := map[bool]string{true: "met", false: "MISSED"}
	fmt.Printf("bench-numa: %d single-numa-node pods placed by the ranker at once on the real node (agent reading a split two-NUMA tree)\n", pods)
	fmt.Printf("bench-numa: pinned from the first instruction: %d of %d (%.0f%%; %d not through the pod's cgroup) (goal 100%%: %s)\n",
		fromFirst, pods, 100*share, notEarly, verdict[fromFirst == pods])
	fmt.Printf("bench-numa: pod-cgroup path, pod seen bound -> pod cgroup narrowed (includes the kubelet making the cgroup): p50 %v  p99 %v\n",
		pct(early, 0.50), pct(early, 0.99))
	fmt.Printf("bench-numa: catch-up path, %d pods running when the agent started, agent start -> pinned: p50 %v  p99 %v  (goal p99 <= 100ms: %s)\n",
		len(catchUp), pct(catchUp, 0.50), pct(catchUp, 0.99), verdict[pct(catchUp, 0.99) <= 100*time.Millisecond])
}

// TestNUMADevicesSpanNodes: a pod that needs more accelerators than one NUMA node holds
// gets both NUMA nodes in numa.sextant.io/nodes, accelerators on them only, and, once
// pinned, the CPUs of both.
func TestNUMADevicesSpanNodes(t *testing.T) {
	h := newNUMAHarness(t)
	eventually(t, time.Minute, func() (bool, string) {
		n, err := local.kube.CoreV1().Nodes().Get(context.Background(), local.nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q := n.Status.Allocatable[v1alpha1.KindAccelerator.ResourceName()]
		return q.Value() == 4, fmt.Sprintf("allocatable %s = %s, want 4", v1alpha1.KindAccelerator.ResourceName(), q.String())
	})
	three := resource.MustParse("3")
	c := h.container("main", loop)
	c.Resources.Requests[v1alpha1.KindAccelerator.ResourceName()] = three
	c.Resources.Limits = corev1.ResourceList{v1alpha1.KindAccelerator.ResourceName(): three}
	p := h.pod("wide", nil, c)
	delete(p.Annotations, annotations.NUMAPolicy)
	h.create(p)

	got := waitScheduled(t, h.ns, "wide", 2*time.Minute)
	if v := got.Annotations[annotations.NUMANodes]; v != "0,1" {
		t.Fatalf("%s = %q, want \"0,1\": three accelerators need both NUMA nodes", annotations.NUMANodes, v)
	}
	alloc, err := annotations.ParseAllocation(got.Annotations[annotations.DevicesAllocated])
	if err != nil {
		t.Fatal(err)
	}
	ids := alloc[v1alpha1.KindAccelerator.ResourceName()]
	perNUMA := map[string]int{}
	for _, id := range ids {
		numa, ok := h.accelerators[id]
		if !ok {
			t.Fatalf("allocated %s, which is not an accelerator of the tree", id)
		}
		perNUMA[numa]++
	}
	if len(ids) != 3 || perNUMA["0"] == 0 || perNUMA["1"] == 0 {
		t.Fatalf("allocated %v (per NUMA node %v), want three accelerators from both NUMA nodes", ids, perNUMA)
	}
	all := topology.FormatCPUList(append(mustCPUs(t, h.numaCPUs["0"]), mustCPUs(t, h.numaCPUs["1"])...))
	h.checkFirst("wide", "main", all)
	checkContainerCgroups(t, h.ns, "wide", all)
}

// TestDeviceExactIDs: the device plugin hands each container exactly the devices the
// ranker wrote into its pod. Two pods of two accelerators each run at once on the split
// tree's four: each container's SEXTANT_ACCELERATOR lists its annotated IDs, the
// kubelet's PodResources agree, and the sets are disjoint. Then an accelerator turns
// Unhealthy in the tree: the kubelet's allocatable drops within the topology interval
// and a pod needing four stays Pending with DeviceAware's reason.
func TestDeviceExactIDs(t *testing.T) {
	h := newNUMAHarness(t)
	resourceName := v1alpha1.KindAccelerator.ResourceName()
	allocatable := func(want int64) {
		t.Helper()
		eventually(t, time.Minute, func() (bool, string) {
			n, err := local.kube.CoreV1().Nodes().Get(context.Background(), local.nodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			q := n.Status.Allocatable[resourceName]
			return q.Value() == want, fmt.Sprintf("allocatable %s = %s, want %d", resourceName, q.String(), want)
		})
	}
	allocatable(4)
	two := resource.MustParse("2")
	for _, name := range []string{"dev-a", "dev-b"} {
		c := h.container("main", `echo "devices=$`+deviceplugin.EnvName(v1alpha1.KindAccelerator)+`"; `+loop)
		c.Resources.Requests[resourceName] = two
		c.Resources.Limits = corev1.ResourceList{resourceName: two}
		// NUMA node 1 of the tree has no memory: the second pod takes its memory from
		// node 0 and its accelerators from node 1.
		p := h.pod(name, nil, c)
		delete(p.Annotations, annotations.NUMAPolicy)
		h.create(p)
	}
	prSock := podResourcesSocket(t)
	kubelet, err := podresources.Dial(prSock)
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Close()
	seen := map[string]string{}
	for _, name := range []string{"dev-a", "dev-b"} {
		p := waitScheduled(t, h.ns, name, 2*time.Minute)
		alloc, err := annotations.ParseAllocation(p.Annotations[annotations.DevicesAllocated])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := slices.Sorted(slices.Values(alloc[resourceName]))
		if len(want) != 2 {
			t.Fatalf("%s: allocated %v, want two accelerators", name, alloc)
		}
		for _, id := range want {
			if other, dup := seen[id]; dup {
				t.Errorf("%s and %s were both given %s", other, name, id)
			}
			seen[id] = name
		}
		env, got := h.printedDevices(name)
		if !slices.Equal(got, want) {
			t.Errorf("%s: %s=%q, want the annotated %v", name, deviceplugin.EnvName(v1alpha1.KindAccelerator), env, want)
		}
		// The kubelet's own record of what it gave the container.
		var held []string
		eventually(t, time.Minute, func() (bool, string) {
			list, err := kubelet.List(context.Background())
			if err != nil {
				return false, err.Error()
			}
			held = nil
			for _, pr := range list {
				if pr.GetNamespace() != h.ns || pr.GetName() != name {
					continue
				}
				for _, c := range pr.GetContainers() {
					for _, d := range c.GetDevices() {
						if d.GetResourceName() == string(resourceName) {
							held = append(held, d.GetDeviceIds()...)
						}
					}
				}
			}
			return len(held) > 0, fmt.Sprintf("PodResources has no %s for %s", resourceName, name)
		})
		slices.Sort(held)
		if !slices.Equal(held, want) {
			t.Errorf("%s: PodResources say %v, the annotation %v", name, held, want)
		}
	}

	// NodeTopology publishes which pod holds each device, from the kubelet's record.
	eventually(t, time.Minute, func() (bool, string) {
		nt, err := getNodeTopology(context.Background(), local.nodeName)
		if err != nil {
			return false, err.Error()
		}
		held := map[string]string{}
		for _, d := range nt.Status.PCIDevices {
			if d.Holder != nil && d.Holder.Namespace == h.ns {
				held[d.Address] = d.Holder.Name
			}
		}
		return maps.Equal(held, seen), fmt.Sprintf("NodeTopology holders %v, want %v", held, seen)
	})

	// One accelerator loses its driver: Unhealthy, and the kubelet counts three.
	var sick string
	for addr := range h.accelerators {
		sick = addr
		break
	}
	if err := os.Remove(filepath.Join(h.sysfsRoot, "sys/devices/pci0000:00", sick, "driver")); err != nil {
		t.Fatal(err)
	}
	allocatable(3)
	four := resource.MustParse("4")
	c := h.container("main", loop)
	c.Resources.Requests[resourceName] = four
	c.Resources.Limits = corev1.ResourceList{resourceName: four}
	wide := h.pod("dev-four", nil, c)
	delete(wide.Annotations, annotations.NUMAPolicy)
	h.create(wide)
	eventually(t, time.Minute, func() (bool, string) {
		p, err := local.kube.CoreV1().Pods(h.ns).Get(context.Background(), "dev-four", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("a pod needing four accelerators was bound with three healthy")
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && strings.Contains(cond.Message, "accelerator") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %+v, want Unschedulable naming the accelerators", p.Status.Conditions)
	})
}

// TestDeviceHeldElsewhereAndKubeletRestart: a pod default-scheduler placed takes an
// accelerator through the plugin without any annotation; NodeTopology names it as the
// holder and the ranker never gives that accelerator to its own pod. A pod bound with
// the held accelerator among its chosen ones cannot get it: the plugin refuses the
// kubelet's other devices and the pod fails. After a kubelet restart, with another
// PodResources client listing all the while, the plugin registers again, the
// accelerator stays held, and a new pod still gets exactly its IDs.
func TestDeviceHeldElsewhereAndKubeletRestart(t *testing.T) {
	h := newNUMAHarness(t)
	resourceName := v1alpha1.KindAccelerator.ResourceName()
	ctx := context.Background()
	h.waitAcceleratorsFree()
	socket := podResourcesSocket(t)
	h.create(h.plainDevicePod("other", 1))
	held := h.waitHeldBy("other")
	// The kubelet admits the pod, and so lists its device, before its container runs; a
	// kubelet restarted in between allocates the pod's devices anew, and the check at
	// the end (other still running on held) would judge that, not a restart of a running
	// pod. Wait until the container has run.
	h.printedDevices("other")

	// A decision the node cannot carry out: a pod bound (by the test, in the ranker's
	// place) with the held accelerator among its chosen ones. The kubelet cannot give it
	// that one; the plugin refuses the others, and the kubelet fails the pod.
	var free string
	for addr := range h.accelerators {
		if addr != held {
			free = addr
			break
		}
	}
	two := resource.MustParse("2")
	c := h.container("main", loop)
	c.Resources.Requests[resourceName] = two
	c.Resources.Limits = corev1.ResourceList{resourceName: two}
	stale := h.pod("stale", nil, c)
	stale.Spec.SchedulerName = "no-scheduler"
	delete(stale.Annotations, annotations.NUMAPolicy)
	h.create(stale)
	refusedBefore := h.agent.counter(`sextant_device_allocations_refused_total{resource="` + string(resourceName) + `"}`)
	if err := local.kube.CoreV1().Pods(h.ns).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: "stale", Namespace: h.ns, Annotations: map[string]string{
			annotations.DevicesAllocated: annotations.Allocation{resourceName: {held, free}}.String()}},
		Target: corev1.ObjectReference{Kind: "Node", Name: local.nodeName},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, func() (bool, string) {
		p, err := local.kube.CoreV1().Pods(h.ns).Get(ctx, "stale", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded {
			t.Fatalf("the pod chosen %s and %s ran without %s", held, free, held)
		}
		return p.Status.Phase == corev1.PodFailed && strings.Contains(p.Status.Message, "the ranker chose other devices"),
			fmt.Sprintf("the pod is %s (%s: %s), want Failed by the device plugin's refusal", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
	if refused := h.agent.counter(`sextant_device_allocations_refused_total{resource="` + string(resourceName) + `"}`); refused <= refusedBefore {
		t.Errorf("sextant_device_allocations_refused_total = %v after the refusal, was %v", refused, refusedBefore)
	}
	if err := local.kube.CoreV1().Pods(h.ns).Delete(ctx, "stale", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}

	// The ranker's pod asks for the three others; it must not get the held one.
	three := resource.MustParse("3")
	c = h.container("main", `echo "devices=$`+deviceplugin.EnvName(v1alpha1.KindAccelerator)+`"; `+loop)
	c.Resources.Requests[resourceName] = three
	c.Resources.Limits = corev1.ResourceList{resourceName: three}
	mine := h.pod("mine", nil, c)
	delete(mine.Annotations, annotations.NUMAPolicy)
	h.create(mine)
	p := waitScheduled(t, h.ns, "mine", 2*time.Minute)
	alloc, err := annotations.ParseAllocation(p.Annotations[annotations.DevicesAllocated])
	if err != nil {
		t.Fatal(err)
	}
	if ids := alloc[resourceName]; len(ids) != 3 || slices.Contains(ids, held) {
		t.Fatalf("the ranker gave %v, want three accelerators without %s (held by the default-scheduler pod)", ids, held)
	}
	if err := local.kube.CoreV1().Pods(h.ns).Delete(ctx, "mine", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}

	// A kubelet restart: the plugin registers again, and a new pod gets exactly its IDs.
	// Meanwhile another PodResources client (a metrics exporter, say) lists 50 times a
	// second, half the kubelet's rate limit: a List the starting kubelet answers before
	// it has admitted its pods again lists other without its accelerator, and if it
	// raced that admission the kubelet drops other's allocation and counts the
	// accelerator free although other's container still has it. Either way the agent
	// must keep other as its holder.
	stopLists := make(chan struct{})
	listsDone := make(chan struct{})
	go func() {
		defer close(listsDone)
		for {
			c, err := podresources.Dial(socket)
			for err == nil {
				select {
				case <-stopLists:
					c.Close()
					return
				case <-time.After(20 * time.Millisecond):
				}
				_, err = c.List(ctx)
			}
			if c != nil {
				c.Close()
			}
			select {
			case <-stopLists:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	// And NodeTopology must name other as the holder all the while: the ranker places
	// pods by it.
	lostHolder := h.watchHolder(held, "other")
	registered := func() int { return strings.Count(h.agent.proc.output(), `"msg":"registered with the kubelet"`) }
	before := registered()
	stopListing := sync.OnceFunc(func() { close(stopLists); <-listsDone })
	t.Cleanup(stopListing)
	restartKubelet(t)
	eventually(t, time.Minute, func() (bool, string) {
		return registered() > before, "the device plugin did not register again after the kubelet restarted"
	})
	stopListing()
	// The kubelet admits a pod's devices only once the plugin has listed them to it
	// again; before that it fails the pod (UnexpectedAdmissionError), as with any plugin.
	kubelet, err := podresources.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Close()
	eventually(t, time.Minute, func() (bool, string) {
		devs, err := kubelet.AllocatableDevices(ctx)
		if err != nil {
			return false, err.Error()
		}
		return len(devs[string(resourceName)]) == 4, fmt.Sprintf("the restarted kubelet can allocate %v, want the 4 accelerators", devs[string(resourceName)])
	})
	// And only once it has released the devices of the pod deleted before.
	eventually(t, time.Minute, func() (bool, string) {
		list, err := kubelet.List(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, pr := range list {
			if pr.GetNamespace() == h.ns && pr.GetName() == "mine" {
				return false, "the kubelet still holds the deleted pod's devices"
			}
		}
		return true, ""
	})
	eventually(t, 2*time.Minute, func() (bool, string) {
		pods, err := local.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=mine"})
		return err == nil && len(pods.Items) == 0, "the deleted pod is still there"
	})
	c = h.container("main", `echo "devices=$`+deviceplugin.EnvName(v1alpha1.KindAccelerator)+`"; `+loop)
	c.Resources.Requests[resourceName] = two
	c.Resources.Limits = corev1.ResourceList{resourceName: two}
	// A pod the kubelet admits before the plugin has listed its devices again is
	// rejected (UnexpectedAdmissionError), as with any device plugin: like a
	// controller, make a new one until one runs.
	var p2 *corev1.Pod
	eventually(t, 2*time.Minute, func() (bool, string) {
		if p2 != nil {
			cur, err := local.kube.CoreV1().Pods(h.ns).Get(ctx, "after-restart", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if alloc, err := annotations.ParseAllocation(cur.Annotations[annotations.DevicesAllocated]); err == nil && slices.Contains(alloc[resourceName], held) {
				t.Fatalf("after the kubelet restart the ranker gave %s to after-restart (%v), while other still holds it", held, alloc[resourceName])
			}
			switch cur.Status.Phase {
			case corev1.PodRunning:
				p2 = cur
				return true, ""
			case corev1.PodFailed:
				t.Logf("after-restart rejected (%s: %s); making it again", cur.Status.Reason, cur.Status.Message)
				_ = local.kube.CoreV1().Pods(h.ns).Delete(ctx, "after-restart", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				p2 = nil
			}
			return false, "after-restart is " + string(cur.Status.Phase)
		}
		after := h.pod("after-restart", nil, c)
		delete(after.Annotations, annotations.NUMAPolicy)
		created, err := local.kube.CoreV1().Pods(h.ns).Create(ctx, after, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error() // the deleted one may not be gone yet
		}
		p2 = created
		return false, "after-restart created"
	})
	p = p2
	alloc, err = annotations.ParseAllocation(p.Annotations[annotations.DevicesAllocated])
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(alloc[resourceName]))
	env, got := h.printedDevices("after-restart")
	if !slices.Equal(got, want) || slices.Contains(got, held) {
		t.Errorf("after the kubelet restart: %s=%q, want the annotated %v (never %s)", deviceplugin.EnvName(v1alpha1.KindAccelerator), env, want, held)
	}
	if lost := lostHolder(); lost != "" {
		t.Errorf("NodeTopology named %s as the holder of %s after the kubelet restart, want other all the while", lost, held)
	}
	// When the kubelet forgot other's allocation it never lists it again; the agent
	// still names other as the holder.
	eventually(t, time.Minute, func() (bool, string) {
		list, err := kubelet.List(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, pr := range list {
			if pr.GetNamespace() == h.ns && pr.GetName() == "other" && slices.ContainsFunc(pr.GetContainers(), func(c *podresourcesapi.ContainerResources) bool {
				return slices.ContainsFunc(c.GetDevices(), func(d *podresourcesapi.ContainerDevices) bool { return slices.Contains(d.GetDeviceIds(), held) })
			}) {
				return true, ""
			}
		}
		t.Logf("the restarted kubelet does not list other with %s", held)
		holders, err := topologyHolders(ctx)
		if err != nil {
			return false, err.Error()
		}
		return holders[held] == h.ns+"/other", "NodeTopology no longer names other as the holder of " + held
	})
	t.Logf("the agent kept a holder the kubelet stopped listing %d time(s)", strings.Count(h.agent.proc.output(), "the kubelet no longer lists the device"))
	if o, err := local.kube.CoreV1().Pods(h.ns).Get(ctx, "other", metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if o.Status.Phase != corev1.PodRunning {
		t.Errorf("other is %s after the kubelet restart (%s), want it still running on %s", o.Status.Phase, o.Status.Message, held)
	}
}

// A kubelet that forgets which pod has a device (its checkpoint gone, as a PodResources
// List racing its start can make it do) offers the device as free while the pod's
// container still uses it. The agent keeps naming the pod as the holder, through a
// restart of its own too, and its device plugin keeps a plain pod off the device.
func TestDeviceHolderKeptWhenTheKubeletForgets(t *testing.T) {
	h := newNUMAHarness(t)
	ctx := context.Background()
	h.waitAcceleratorsFree()
	h.create(h.plainDevicePod("other", 1))
	held := h.waitHeldBy("other")
	// A kubelet that restarts before the container runs allocates the pod's devices anew.
	h.printedDevices("other")
	lostHolder := h.watchHolder(held, "other")
	t.Cleanup(func() {
		if lost := lostHolder(); t.Failed() && lost != "" {
			t.Logf("meanwhile NodeTopology named %s as the holder of %s", lost, held)
		}
	})

	// Each look at the kubelet dials anew: a connection from before a restart may be in
	// its reconnect backoff.
	socket := podResourcesSocket(t)
	dialKubelet := func() *podresources.Client {
		t.Helper()
		c, err := podresources.Dial(socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	const kept = "the kubelet no longer lists the device of a pod still running on the node"
	keptLogs := func() int { return strings.Count(h.agent.proc.output(), kept) }
	// keptOrListed waits until the agent logs keeping other as the holder more than
	// before times (true), or the kubelet lists other with devices again (false), which
	// must then be held alone: a kubelet that admits the running pod again once its
	// sources are ready asks the plugin anew, and the plugin, with no pod waiting,
	// offers the device in use, other's own.
	keptOrListed := func(before int) bool {
		t.Helper()
		kubelet := dialKubelet()
		var ids []string
		eventually(t, time.Minute, func() (bool, string) {
			if keptLogs() > before {
				return true, ""
			}
			ids = nil
			list, err := kubelet.List(ctx)
			if err != nil {
				return false, err.Error()
			}
			for _, pr := range list {
				if pr.GetNamespace() == h.ns && pr.GetName() == "other" {
					for _, c := range pr.GetContainers() {
						for _, d := range c.GetDevices() {
							ids = append(ids, d.GetDeviceIds()...)
						}
					}
				}
			}
			return len(ids) > 0, "the agent has not kept other as the holder, and the kubelet lists other without devices"
		})
		if keptLogs() > before {
			return true
		}
		if !slices.Equal(ids, []string{held}) {
			t.Fatalf("the restarted kubelet gave other %v, want %s, the accelerator its container has", ids, held)
		}
		return false
	}
	// The kubelet forgets other's device when it admits the running pod again before
	// its pod sources are ready; restart until it forgot and the agent kept the holder.
	registered := func() int { return strings.Count(h.agent.proc.output(), `"msg":"registered with the kubelet"`) }
	for try := 1; ; try++ {
		before, keptBefore := registered(), keptLogs()
		restartKubelet(t, "--forget-devices")
		eventually(t, time.Minute, func() (bool, string) {
			return registered() > before, "the device plugin did not register again after the kubelet restarted"
		})
		if keptOrListed(keptBefore) {
			break
		}
		if try == 5 {
			t.Fatalf("the kubelet restarted without its checkpoint %d times and never forgot other's %s", try, held)
		}
		t.Logf("restart %d: the kubelet admitted other again and gave it its %s back", try, held)
	}

	// A new agent never saw the kubelet list the device: it keeps what its node published.
	h.agent.stop()
	h.agent.start()
	if !keptOrListed(0) {
		t.Logf("the kubelet admitted other again after the agent restarted and gave it its %s back", held)
	}
	kubelet := dialKubelet()
	eventually(t, time.Minute, func() (bool, string) {
		devs, err := kubelet.AllocatableDevices(ctx)
		if err != nil {
			return false, err.Error()
		}
		return len(devs[string(v1alpha1.KindAccelerator.ResourceName())]) == 4, "the kubelet has not got the 4 accelerators from the new agent's plugin yet"
	})

	// The kubelet counts other's accelerator free; a pod of the default scheduler asking
	// for three gets the three others. A pod the kubelet admits before it has the
	// plugin's devices fails; like a controller, make it again.
	running := false
	eventually(t, 2*time.Minute, func() (bool, string) {
		cur, err := local.kube.CoreV1().Pods(h.ns).Get(ctx, "plain", metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err := local.kube.CoreV1().Pods(h.ns).Create(ctx, h.plainDevicePod("plain", 3), metav1.CreateOptions{})
			return false, fmt.Sprintf("plain created (%v)", err)
		case err != nil:
			return false, err.Error()
		case cur.Status.Phase == corev1.PodFailed:
			t.Logf("plain rejected (%s: %s); making it again", cur.Status.Reason, cur.Status.Message)
			_ = local.kube.CoreV1().Pods(h.ns).Delete(ctx, "plain", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		running = cur != nil && cur.Status.Phase == corev1.PodRunning
		return running, "plain is " + string(cur.Status.Phase)
	})
	if env, got := h.printedDevices("plain"); len(got) != 3 || slices.Contains(got, held) {
		t.Errorf("plain got %s=%q, want three accelerators without %s, which other still uses", deviceplugin.EnvName(v1alpha1.KindAccelerator), env, held)
	}
	if lost := lostHolder(); lost != "" {
		t.Errorf("NodeTopology named %s as the holder of %s, want other all the while", lost, held)
	}
	if o, err := local.kube.CoreV1().Pods(h.ns).Get(ctx, "other", metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if o.Status.Phase != corev1.PodRunning {
		t.Errorf("other is %s after the kubelet restart (%s), want it still running on %s", o.Status.Phase, o.Status.Message, held)
	}
	// The kubelet does not count other's accelerator: the next test must not find it
	// taken by a pod still going away.
	for _, name := range []string{"other", "plain"} {
		if err := local.kube.CoreV1().Pods(h.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Error(err)
		}
	}
	eventually(t, 2*time.Minute, func() (bool, string) {
		pods, err := local.kube.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, fmt.Sprintf("the test's pods are still there (%v)", err)
	})
}

// plainDevicePod is a pod of the default scheduler asking for n accelerators, which
// prints the accelerators it got.
func (h *numaHarness) plainDevicePod(name string, n int64) *corev1.Pod {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	resourceName := v1alpha1.KindAccelerator.ResourceName()
	c := h.container("main", `echo "devices=$`+deviceplugin.EnvName(v1alpha1.KindAccelerator)+`"; `+loop)
	c.Resources.Requests[resourceName] = q
	c.Resources.Limits = corev1.ResourceList{resourceName: q}
	p := h.pod(name, nil, c)
	p.Spec.SchedulerName = corev1.DefaultSchedulerName
	delete(p.Annotations, annotations.NUMAPolicy)
	return p
}

// waitAcceleratorsFree waits until the kubelet can allocate the split tree's four
// accelerators and no pod of an earlier test holds one: the kubelet counts them taken
// until those pods are gone.
func (h *numaHarness) waitAcceleratorsFree() {
	t := h.t
	t.Helper()
	ctx := context.Background()
	resourceName := v1alpha1.KindAccelerator.ResourceName()
	eventually(t, time.Minute, func() (bool, string) {
		n, err := local.kube.CoreV1().Nodes().Get(ctx, local.nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q := n.Status.Allocatable[resourceName]
		return q.Value() == 4, fmt.Sprintf("allocatable %s = %s, want 4", resourceName, q.String())
	})
	// The kubelet counts the accelerators of an earlier test's pods taken until they
	// are gone.
	earlier, err := podresources.Dial(podResourcesSocket(t))
	if err != nil {
		t.Fatal(err)
	}
	defer earlier.Close()
	eventually(t, 2*time.Minute, func() (bool, string) {
		list, err := earlier.List(ctx)
		if err != nil {
			return false, err.Error()
		}
		var held []string
		for _, pr := range list {
			for _, c := range pr.GetContainers() {
				for _, d := range c.GetDevices() {
					if d.GetResourceName() == string(resourceName) {
						held = append(held, pr.GetNamespace()+"/"+pr.GetName())
					}
				}
			}
		}
		return len(held) == 0, fmt.Sprintf("pods of earlier tests still hold accelerators: %v", held)
	})
}

// waitHeldBy waits until NodeTopology names the pod of the test's namespace as the
// holder of an accelerator, and returns its address.
func (h *numaHarness) waitHeldBy(pod string) string {
	h.t.Helper()
	var held string
	eventually(h.t, 2*time.Minute, func() (bool, string) {
		holders, err := topologyHolders(context.Background())
		if err != nil {
			return false, err.Error()
		}
		for addr, holder := range holders {
			if holder == h.ns+"/"+pod {
				held = addr
				return true, ""
			}
		}
		return false, "NodeTopology names no device held by " + pod
	})
	return held
}

// watchHolder polls NodeTopology every 200 ms until the returned func is called, which
// says when and whom it named as the holder of addr if ever not the pod ("" if never).
func (h *numaHarness) watchHolder(addr, pod string) func() string {
	stop, done := make(chan struct{}), make(chan struct{})
	var lost string
	go func() {
		defer close(done)
		for lost == "" {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			holders, err := topologyHolders(context.Background())
			if err == nil && holders[addr] != h.ns+"/"+pod {
				lost = fmt.Sprintf("%q at %s", holders[addr], time.Now().Format(time.StampMilli))
			}
		}
	}()
	stopped := sync.OnceFunc(func() { close(stop); <-done })
	h.t.Cleanup(stopped)
	return func() string { stopped(); return lost }
}

// topologyHolders reads the node's NodeTopology: PCI address -> namespace/name of the
// pod it names as the device's holder.
func topologyHolders(ctx context.Context) (map[string]string, error) {
	nt, err := getNodeTopology(ctx, local.nodeName)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, d := range nt.Status.PCIDevices {
		if d.Holder != nil {
			out[d.Address] = d.Holder.Namespace + "/" + d.Holder.Name
		}
	}
	return out, nil
}

// restartKubelet restarts the local kubelet (scripts/cluster.sh restart-kubelet).
func restartKubelet(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot(t), "scripts", "cluster.sh"), append([]string{"restart-kubelet"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("restart the kubelet: %v\n%s", err, out)
	}
}

// printedDevices waits for the pod's main container to print its devices (a line
// devices=$SEXTANT_ACCELERATOR) and returns the line's value and its IDs, sorted.
func (h *numaHarness) printedDevices(pod string) (string, []string) {
	h.t.Helper()
	var env string
	eventually(h.t, 2*time.Minute, func() (bool, string) {
		logs, err := local.kube.CoreV1().Pods(h.ns).GetLogs(pod, &corev1.PodLogOptions{Container: "main"}).DoRaw(context.Background())
		if err != nil {
			return false, err.Error()
		}
		for _, l := range strings.Split(string(logs), "\n") {
			if v, ok := strings.CutPrefix(l, "devices="); ok {
				env = v
				return true, ""
			}
		}
		return false, pod + " has not printed its devices yet"
	})
	ids := strings.Split(env, ",")
	slices.Sort(ids)
	return env, ids
}

func mustCPUs(t *testing.T, list string) []int32 {
	t.Helper()
	cpus, err := topology.ParseCPUList(list)
	if err != nil {
		t.Fatal(err)
	}
	return cpus
}
