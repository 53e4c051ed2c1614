// Package netnstest holds helpers for tests in network namespaces: making them, running
// commands and servers there, and netlink handles into them (the meter's and the
// shaper's tests and the e2e suite).
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// WaitListening waits until a TCP socket listens on port in network namespace ns: a
// server started moments ago may not have bound yet on a loaded machine, and a client
// that comes too early is refused.
func WaitListening(t testing.TB, ns string, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "exec", ns, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		if err == nil && len(strings.TrimSpace(string(out))) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on TCP port %d in network namespace %s after 10s", port, ns)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// New makes a network namespace whose name starts with prefix and deletes it, with
// everything in it, when the test ends. It skips the test unless it runs as root with
// iproute2. It returns the namespace's name and its path under /var/run/netns.
func New(t testing.TB, prefix string) (name, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to make network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: needs iproute2's ip")
	}
	name = fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), counter.Add(1))
	Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return name, "/var/run/netns/" + name
}

var counter atomic.Int64

// Run runs a command and fails the test with its output if it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Handle opens a netlink handle in the network namespace at path, closed when the test
// ends. A handle is the test's own: it is not for two goroutines at once.
func Handle(t testing.TB, path string) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}
