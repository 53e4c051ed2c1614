package enforce

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"sextant.io/sextant/agent/cgroups"
)

// PodCgroup is a host-network pod's pod cgroup on cgroup v2.
type PodCgroup struct {
	// ID is the cgroup's ID (the inode of its directory), which the classifier looks
	// sockets up by.
	ID uint64
	// Path is its directory, where the socket-labelling program is attached.
	Path string
}

// HostNetworkCgroups returns how the enforcer finds a host-network pod's cgroup on
// cgroup v2. It returns nil where cgroupRoot holds no cgroup v2 hierarchy: on cgroup v1
// a socket's cgroup cannot be read at tc, and host-network pods share the node's class.
// kubepods is the kubelet's kubepods cgroup relative to cgroupRoot, empty to look for
// the usual names.
func HostNetworkCgroups(cgroupRoot, kubepods string) func(*corev1.Pod) PodCgroup {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		return nil
	}
	h := cgroups.Hierarchy{Dir: cgroupRoot, Version: cgroups.V2}
	return func(pod *corev1.Pod) PodCgroup {
		k, err := cgroups.FindKubepods(h, kubepods)
		if err != nil {
			return PodCgroup{}
		}
		dir, ok := k.PodDir(string(pod.UID))
		if !ok {
			return PodCgroup{}
		}
		var st unix.Stat_t
		if unix.Stat(dir, &st) != nil {
			return PodCgroup{}
		}
		return PodCgroup{ID: st.Ino, Path: dir}
	}
}

// sockLinks attaches the socket-labelling program to host-network pods' cgroups. Its
// links are bpf_links held by the agent: they go with it, so nothing stays attached to a
// pod's cgroup after an uninstall. Sockets a host-network pod opens while no agent runs
// keep no label (their egress is still classified by cgroup at tc).
type sockLinks struct {
	prog  *ebpf.Program
	links map[string]link.Link // by cgroup path
}

// sync attaches the program to exactly the cgroups in want.
func (s *sockLinks) sync(want map[string]bool) error {
	var errs []error
	for path, l := range s.links {
		if !want[path] {
			if err := l.Close(); err != nil {
				errs = append(errs, fmt.Errorf("detach from cgroup %s: %w", path, err))
			}
			delete(s.links, path)
		}
	}
	for path := range want {
		if _, ok := s.links[path]; ok {
			continue
		}
		l, err := link.AttachCgroup(link.CgroupOptions{Path: path, Attach: ebpf.AttachCGroupInetSockCreate, Program: s.prog})
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // the pod is gone
			}
			errs = append(errs, fmt.Errorf("attach to cgroup %s: %w", path, err))
			continue
		}
		s.links[path] = l
	}
	return errors.Join(errs...)
}

func (s *sockLinks) close() {
	for path, l := range s.links {
		l.Close()
		delete(s.links, path)
	}
}
