// Package procsignal signals a container's main process directly, by its PID on the
// host, without a round trip through the container runtime: containerd's task service
// passes a signal to the container's shim, which runs `runc kill`, a new process,
// and under a burst of finishing Jobs that was most of a stop's time (docs/design/0074).
//
// The PID comes from containerd. Between learning it and signalling, the process can
// exit and its PID go to another; so the signal goes through a pidfd, which names one
// process for as long as it is open, and only once that process is shown to be the
// container's: its cgroup names the container's ID.
package procsignal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Signaller signals containers' processes. It must run in the host's PID namespace
// (a pod with hostPID), which is the namespace of the PIDs containerd reports; in
// another, a PID names another process or none, and Signal refuses it.
type Signaller struct {
	// ProcRoot is the procfs of the caller's own PID namespace, where a PID names the
	// same process pidfd_open(2) opens: /proc. A field for tests only.
	ProcRoot string
}

// ErrNotContainer is returned, wrapped, when the process at a PID is not the
// container's.
var ErrNotContainer = errors.New("not the container's process")

// Signal sends sig to process pid if it is container id's.
func (s Signaller) Signal(pid uint32, id string, sig syscall.Signal) error {
	if pid == 0 || id == "" {
		return fmt.Errorf("signal process %d of container %q: want a PID and a container ID", pid, id)
	}
	fd, err := openOwned(s.ProcRoot, pid, id)
	if err != nil {
		return fmt.Errorf("signal process %d of container %s: %w", pid, id, err)
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		return fmt.Errorf("signal process %d of container %s (%s): %w", pid, id, sig, err)
	}
	return nil
}

// openOwned opens a pidfd for process pid once it is shown to be container id's.
func openOwned(procRoot string, pid uint32, id string) (int, error) {
	fd, err := unix.PidfdOpen(int(pid), 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd_open: %w", err)
	}
	if procRoot == "" {
		procRoot = "/proc"
	}
	cg, err := os.ReadFile(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	if !strings.Contains(string(cg), id) {
		unix.Close(fd)
		return -1, fmt.Errorf("its cgroup is %q: %w", strings.TrimSpace(string(cg)), ErrNotContainer)
	}
	// The cgroup was read at the PID after the pidfd was opened. If the pidfd's process
	// still lives now, it lived then, and the PID was still its own: the cgroup read
	// was its cgroup.
	if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// SignalNumber reads a stop signal as containerd's CRI records it ("SIGTERM", "TERM",
// "15"); ok is false for a name it does not know, such as a real-time signal's.
func SignalNumber(name string) (syscall.Signal, bool) {
	name = strings.ToUpper(strings.TrimSpace(name))
	if n, err := strconv.Atoi(name); err == nil {
		if n <= 0 || n > 31 {
			return 0, false
		}
		return syscall.Signal(n), true
	}
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	sig := unix.SignalNum(name)
	return sig, sig != 0
}
