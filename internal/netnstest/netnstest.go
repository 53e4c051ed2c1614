// Package netnstest holds helpers for tests that run servers in network namespaces
// (the meter's veth tests and the e2e suite).
package netnstest

import (
	"fmt"
	"os/exec"
	"strings"
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
