package procsignal

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// heard collects what an Exits reports.
type heard chan string

func (h heard) onExit(id string, _ time.Time) { h <- id }

func (h heard) await(t *testing.T, want string) {
	t.Helper()
	select {
	case id := <-h:
		if id != want {
			t.Fatalf("exit of %q reported, want %q", id, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the exit of %q was not reported within 30s", want)
	}
}

func TestExitsReportsEachWatchedExitOnce(t *testing.T) {
	h := make(heard, 8)
	e, err := NewExits("", h.onExit)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	a, id := startSleep(t)
	b, _ := startSleep(t) // the same cgroup: two processes of one container's ID
	if err := e.Watch(uint32(a.Process.Pid), id); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if err := e.Watch(uint32(b.Process.Pid), id); err != nil {
		t.Fatalf("Watch of a container already watched: %v", err)
	}
	if n := e.Watching(); n != 1 {
		t.Fatalf("watching %d processes, want 1: a container is watched once", n)
	}
	// The child is left unreaped: the shim, not the agent, reaps a container's process,
	// and the exit must be heard before that.
	if err := a.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	h.await(t, id)
	if n := e.Watching(); n != 0 {
		t.Fatalf("watching %d processes after the exit, want 0", n)
	}
	select {
	case id := <-h:
		t.Fatalf("a second report of %q", id)
	case <-time.After(200 * time.Millisecond):
	}
	_ = b.Process.Kill()
}

func TestExitsReportsAProcessThatExitedBeforeTheWatch(t *testing.T) {
	h := make(heard, 1)
	e, err := NewExits("", h.onExit)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cmd, id := startSleep(t)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// A zombie until reaped: wait for it to be one.
	deadline := time.Now().Add(30 * time.Second)
	for !isZombie(cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("the child did not exit within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.Watch(uint32(cmd.Process.Pid), id); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	h.await(t, id)
}

func TestExitsRefusesAnotherContainersProcess(t *testing.T) {
	e, err := NewExits("", func(string, time.Time) { t.Error("an exit reported for a refused watch") })
	if err != nil {
		t.Fatal(err)
	}
	cmd, _ := startSleep(t)
	if err := e.Watch(uint32(cmd.Process.Pid), "0123456789abcdef-not-this-one"); !errors.Is(err, ErrNotContainer) {
		t.Fatalf("Watch of a process of another cgroup: err %v, want ErrNotContainer", err)
	}
	if err := e.Watch(0, "c"); err == nil {
		t.Fatal("Watch of PID 0: no error")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e.Watch(1, "c"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close: err %v, want ErrClosed", err)
	}
}

func TestExitsCloseWithProcessesWatched(t *testing.T) {
	e, err := NewExits("", func(string, time.Time) {})
	if err != nil {
		t.Fatal(err)
	}
	cmd, id := startSleep(t)
	if err := e.Watch(uint32(cmd.Process.Pid), id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30s")
	}
	if err := e.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// isZombie reports whether process pid has exited and awaits its parent's wait.
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
