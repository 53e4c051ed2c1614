package cgroups

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// Rescan is the UID a Watcher sends when events may have been lost (the kernel's
// queue overflowed): every pod must be looked at again.
const Rescan = ""

// Watcher reports pod cgroups as the kubelet creates them, and changes to the pod
// cgroups it was asked to follow (a child cgroup created, a cpuset file written). It
// sends pod UIDs; Rescan when it may have missed some.
type Watcher struct {
	k  *Kubepods
	fw *fsnotify.Watcher
	// UIDs receives the pods to look at.
	UIDs chan string

	mu   sync.Mutex
	pods map[string]string // followed pod cgroup directory → pod UID
	qos  map[string]bool   // QoS directories watched
}

// Watch starts watching k's QoS directories. A QoS directory the kubelet has not made
// yet is watched for once kubepods shows it.
func (k *Kubepods) Watch() (*Watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch pod cgroups: %w", err)
	}
	w := &Watcher{k: k, fw: fw, UIDs: make(chan string, 256), pods: map[string]string{}, qos: map[string]bool{}}
	for _, dir := range k.QoSDirs() {
		if err := w.addQoS(dir); err != nil && dir == k.Dir {
			_ = fw.Close()
			return nil, err
		}
	}
	return w, nil
}

func (w *Watcher) addQoS(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.qos[dir] {
		return nil
	}
	if err := w.fw.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	w.qos[dir] = true
	return nil
}

// Follow reports the pod again whenever a child cgroup appears in podDir or one of its
// cpuset files is written, until Unfollow. On v1 the kubelet copies its parent's set
// into a new pod cgroup right after creating it; following shows a copy that landed
// after the narrowing.
func (w *Watcher) Follow(uid, podDir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.pods[podDir]; ok {
		return nil
	}
	if err := w.fw.Add(podDir); err != nil {
		return fmt.Errorf("watch %s: %w", podDir, err)
	}
	w.pods[podDir] = uid
	return nil
}

// Unfollow stops following podDir. A directory that is gone is dropped by the kernel
// already.
func (w *Watcher) Unfollow(podDir string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.pods[podDir]; !ok {
		return
	}
	delete(w.pods, podDir)
	_ = w.fw.Remove(podDir)
}

// Following counts the pod cgroups followed now.
func (w *Watcher) Following() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pods)
}

// Run turns the kernel's events into UIDs until ctx ends or the watch breaks, then
// closes UIDs.
func (w *Watcher) Run(ctx context.Context) error {
	defer close(w.UIDs)
	defer w.fw.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err, ok := <-w.fw.Errors:
			if !ok {
				return errors.New("cgroup watch closed")
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.send(ctx, Rescan)
				continue
			}
			return fmt.Errorf("cgroup watch: %w", err)
		case ev, ok := <-w.fw.Events:
			if !ok {
				return errors.New("cgroup watch closed")
			}
			w.handle(ctx, ev)
		}
	}
}

func (w *Watcher) handle(ctx context.Context, ev fsnotify.Event) {
	parent, name := filepath.Dir(ev.Name), filepath.Base(ev.Name)
	w.mu.Lock()
	followed, isPod := w.pods[parent]
	if ev.Has(fsnotify.Remove) {
		// The kernel dropped the watch with the directory.
		delete(w.pods, ev.Name)
		delete(w.qos, ev.Name)
	}
	w.mu.Unlock()
	switch {
	case isPod && (ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write) && strings.HasPrefix(name, "cpuset.")):
		w.send(ctx, followed)
	case ev.Has(fsnotify.Create):
		if uid, ok := PodUID(name); ok {
			w.send(ctx, uid)
			return
		}
		// A QoS directory made after the watch began (the kubelet starting up).
		for _, q := range w.k.QoSDirs() {
			if q == ev.Name {
				if err := w.addQoS(q); err == nil {
					w.send(ctx, Rescan) // pods may have been made in it before the watch
				}
			}
		}
	}
}

func (w *Watcher) send(ctx context.Context, uid string) {
	select {
	case w.UIDs <- uid:
	case <-ctx.Done():
	}
}
