package procsignal

import (
	"errors"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// startSleep runs a child that lives until signalled, and the last part of its cgroup
// path, which stands in for a container ID here.
func startSleep(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cgroup")
	if err != nil {
		t.Skipf("no cgroup file: %v", err)
	}
	line := strings.TrimSpace(strings.Split(strings.TrimSpace(string(b)), "\n")[0])
	cg := path.Base(line[strings.LastIndex(line, ":")+1:])
	if cg == "/" || cg == "." || cg == "" {
		t.Skipf("the test's cgroup %q names nothing to tell it by", line)
	}
	return cmd, cg
}

func TestSignalReachesTheContainersProcess(t *testing.T) {
	cmd, id := startSleep(t)
	if err := (Signaller{}).Signal(uint32(cmd.Process.Pid), id, syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the child ended with %v, want killed by SIGTERM", err)
	}
	if ws := exit.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("the child ended with %v, want killed by SIGTERM", ws)
	}
}

func TestSignalRefusesAnotherContainersProcess(t *testing.T) {
	cmd, _ := startSleep(t)
	err := (Signaller{}).Signal(uint32(cmd.Process.Pid), "0123456789abcdef-not-this-one", syscall.SIGTERM)
	if !errors.Is(err, ErrNotContainer) {
		t.Fatalf("Signal to a process of another cgroup: err %v, want ErrNotContainer", err)
	}
	// It still runs: the refused signal was never sent.
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child is gone after a refused signal: %v", err)
	}
}

func TestSignalNumber(t *testing.T) {
	for in, want := range map[string]syscall.Signal{
		"SIGTERM": syscall.SIGTERM, "TERM": syscall.SIGTERM, "sigquit": syscall.SIGQUIT,
		"15": syscall.SIGTERM, " SIGINT ": syscall.SIGINT, "SIGWINCH": syscall.SIGWINCH,
	} {
		if got, ok := SignalNumber(in); !ok || got != want {
			t.Errorf("SignalNumber(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "SIG", "SIGRTMIN+3", "0", "64", "-1", "NOPE"} {
		if got, ok := SignalNumber(bad); ok {
			t.Errorf("SignalNumber(%q) = %v, want not ok", bad, got)
		}
	}
}
