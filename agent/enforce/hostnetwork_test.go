//go:build linux

package enforce

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/internal/netnstest"
)

// cgroup2 mounts the cgroup v2 hierarchy for the test (on a hybrid host none is mounted)
// and makes a kubelet-like tree in it: <mount>/<test>/kubepods/besteffort/pod<uid>. It
// returns the mount, the kubepods path relative to it, and the pod's directory.
func cgroup2(t *testing.T, uid string) (root, kubepods, podDir string) {
	t.Helper()
	root = t.TempDir()
	if out, err := exec.Command("mount", "-t", "cgroup2", "none", root).CombinedOutput(); err != nil {
		t.Skipf("skipping: cannot mount cgroup v2: %v %s", err, out)
	}
	top := filepath.Join(root, fmt.Sprintf("sextant-test-%d", os.Getpid()))
	kubepods, _ = filepath.Rel(root, filepath.Join(top, "kubepods"))
	podDir = filepath.Join(top, "kubepods", "besteffort", "pod"+uid)
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Children first; the test's processes are gone by now.
		for _, d := range []string{podDir, filepath.Dir(podDir), filepath.Dir(filepath.Dir(podDir)), top} {
			_ = os.Remove(d)
		}
		_ = exec.Command("umount", root).Run()
	})
	return root, kubepods, podDir
}

// inCgroup starts a command in the cgroup dir, killed when the test ends.
func inCgroup(t *testing.T, dir string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", `echo $$ > "$0"/cgroup.procs && exec "$@"`, dir}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// A host-network pod shares the node's addresses: its packets are its own only by the
// sockets its processes open in its cgroup. Sent, they get its class by the socket's
// cgroup; received, by the socket they go to, which the agent's cgroup program labelled.
func TestHostNetworkPodClassifiedByCgroup(t *testing.T) {
	for _, tool := range []string{"iperf3", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: needs %s", tool)
		}
	}
	node, path := shaperNetns(t)
	world, _ := netnstest.New(t, "sx-world-")
	netnstest.Run(t, "ip", "-n", node, "link", "set", "w0", "netns", world)
	netnstest.Run(t, "ip", "-n", node, "addr", "add", "10.248.0.1/24", "dev", "up0")
	netnstest.Run(t, "ip", "-n", world, "addr", "add", "10.248.0.2/24", "dev", "w0")
	for _, ns := range []string{node, world} {
		netnstest.Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	netnstest.Run(t, "ip", "-n", world, "link", "set", "w0", "up")

	const uid = "3f9c2a64-1b7e-4c2d-9a55-7e0f6b1d2c3a"
	root, kubepods, podDir := cgroup2(t, uid)
	cgroupOf := HostNetworkCgroups(root, kubepods)
	if cgroupOf == nil {
		t.Fatalf("no cgroup v2 found at %s", root)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid, Name: "host", Namespace: "ns"}, Spec: corev1.PodSpec{HostNetwork: true}}
	cg := cgroupOf(pod)
	if cg.ID == 0 || cg.Path != podDir {
		t.Fatalf("pod cgroup %+v, want %s", cg, podDir)
	}

	s := newShaper(t, path, t.TempDir())
	h := netnstest.Handle(t, path)
	up0 := ifindexIn(t, s, "up0")
	class := Class{Minor: 3, Rate: 400e6, Ceil: 950e6, Pod: uid}
	if err := s.Shape(interfacePlan("up0", []Class{class}, []Class{class})); err != nil {
		t.Fatal(err)
	}
	if err := s.Classify([]Pod{{UID: uid, Cgroup: cg}}, map[types.UID]uint16{uid: 3}); err != nil {
		t.Fatal(err)
	}

	classBytes := func(ifindex int, minor uint16) uint64 {
		stats, err := htb{h: h, ifindex: ifindex}.classes()
		if err != nil {
			t.Fatal(err)
		}
		if c := stats[minor]; c != nil && c.Statistics != nil && c.Statistics.Basic != nil {
			return c.Statistics.Basic.Bytes
		}
		return 0
	}
	podBytes := func(ifindex int) uint64 { return classBytes(ifindex, 3) }
	ifb, err := h.LinkByName(IFBName(up0))
	if err != nil {
		t.Fatal(err)
	}

	// Egress: a client in the pod's cgroup, in the node's namespace, to the world.
	server := exec.Command("ip", "netns", "exec", world, "iperf3", "-s", "-B", "10.248.0.2")
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	netnstest.WaitListening(t, world, 5201)
	inCgroup(t, podDir, "ip", "netns", "exec", node, "iperf3", "-c", "10.248.0.2", "-n", "20M").Wait()
	// iperf3 -n counts what its client wrote; what the kernel still held when the test
	// ended may never go out. So: most of it in the pod's class, next to none elsewhere.
	classified := func(dir string, ifindex int) {
		t.Helper()
		pod, other := podBytes(ifindex), classBytes(ifindex, DefaultMinor)
		if pod < 10e6 || other > 1e6 {
			t.Errorf("%s: the pod's class carried %d bytes of the 20 MiB its process sent or received, the default class %d", dir, pod, other)
		}
	}
	classified("egress", up0)

	// Ingress: a server the pod's process opened after the agent labelled its cgroup,
	// fed from the world: its data arrives on a socket the listener accepted.
	inCgroup(t, podDir, "ip", "netns", "exec", node, "iperf3", "-s", "-B", "10.248.0.1", "-p", "5301")
	netnstest.WaitListening(t, node, 5301)
	netnstest.Run(t, "ip", "netns", "exec", world, "iperf3", "-c", "10.248.0.1", "-p", "5301", "-n", "20M")
	classified("ingress", ifb.Attrs().Index)
	// Traffic of no pod stays in the default class.
	before := podBytes(up0)
	netnstest.Run(t, "ip", "netns", "exec", node, "iperf3", "-c", "10.248.0.2", "-n", "5M")
	time.Sleep(100 * time.Millisecond)
	if got := podBytes(up0); got-before > 1e6 {
		t.Errorf("a process outside the pod's cgroup sent %d bytes in the pod's class", got-before)
	}
}
