// Package netnstest holds helpers for tests that run servers in network namespaces
// (the meter's veth tests and the e2e suite).
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
