package procsignal

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Exits reports the exits of containers' processes the moment they happen: a pidfd
// becomes readable when its process ends, and one epoll loop waits on all of them. It
// hears an exit before containerd does, whose exit event comes only after the shim
// reaped the process and published through containerd's event service, late under a
// burst of finishing Jobs (docs/design/0076). It cannot tell the exit code, which only
// the process's parent (the shim) can read: that still comes from containerd.
type Exits struct {
	procRoot string
	onExit   func(id string, at time.Time)
	epfd     int
	wake     int // an eventfd that ends the loop
	done     chan struct{}

	mu      sync.Mutex
	closed  bool
	byFD    map[int32]string // the pidfds being watched, by the container they are of
	watched map[string]bool  // the containers being watched
}

// NewExits starts watching for exits; onExit is called, from one goroutine, once for
// each process Watch was given, with its container ID and when its exit was seen.
// procRoot is the procfs of the caller's PID namespace, "" for /proc (see Signaller).
func NewExits(procRoot string, onExit func(id string, at time.Time)) (*Exits, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("process exits: epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("process exits: eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(wake)
		unix.Close(epfd)
		return nil, fmt.Errorf("process exits: epoll_ctl: %w", err)
	}
	e := &Exits{procRoot: procRoot, onExit: onExit, epfd: epfd, wake: wake, done: make(chan struct{}),
		byFD: map[int32]string{}, watched: map[string]bool{}}
	go e.loop()
	return e, nil
}

// ErrClosed is returned by Watch after Close.
var ErrClosed = errors.New("process exits: closed")

// Watch reports the exit of process pid, once it is shown to be container id's (as
// Signal checks). Watching a container being watched does nothing. A process that has
// exited but not yet been reaped is reported at once; one reaped is refused (its PID
// names no process, or another container's).
func (e *Exits) Watch(pid uint32, id string) error {
	if pid == 0 || id == "" {
		return fmt.Errorf("watch process %d of container %q: want a PID and a container ID", pid, id)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	if e.watched[id] {
		return nil
	}
	fd, err := openOwned(e.procRoot, pid, id)
	if err != nil {
		return fmt.Errorf("watch process %d of container %s: %w", pid, id, err)
	}
	if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("watch process %d of container %s: epoll_ctl: %w", pid, id, err)
	}
	e.byFD[int32(fd)] = id
	e.watched[id] = true
	return nil
}

// Watching is how many processes are being watched.
func (e *Exits) Watching() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.byFD)
}

// Close stops watching; no onExit call runs once it returns.
func (e *Exits) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	var one [8]byte
	one[0] = 1 // eventfd counts in host byte order; any non-zero count wakes the loop
	if _, err := unix.Write(e.wake, one[:]); err != nil {
		return fmt.Errorf("process exits: wake the loop: %w", err)
	}
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	for fd := range e.byFD {
		unix.Close(int(fd))
	}
	e.byFD = nil
	unix.Close(e.wake)
	return unix.Close(e.epfd)
}

func (e *Exits) loop() {
	defer close(e.done)
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(e.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return // only a bad epoll fd fails here, which is Close's doing
		}
		at := time.Now()
		var ended []string
		e.mu.Lock()
		for _, ev := range events[:n] {
			if int(ev.Fd) == e.wake {
				e.mu.Unlock()
				return
			}
			id, ok := e.byFD[ev.Fd]
			if !ok {
				continue
			}
			delete(e.byFD, ev.Fd)
			delete(e.watched, id)
			_ = unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, int(ev.Fd), nil)
			unix.Close(int(ev.Fd))
			ended = append(ended, id)
		}
		e.mu.Unlock()
		for _, id := range ended {
			e.onExit(id, at)
		}
	}
}
