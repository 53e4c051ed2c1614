package enforce

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"sextant.io/sextant/agent/cgroups"
)

// HostNetworkCgroups returns how the enforcer finds a host-network pod's cgroup on
// cgroup v2: its ID is the inode of the pod cgroup's directory. It returns nil where
// cgroupRoot holds no cgroup v2 hierarchy: on cgroup v1 a socket's cgroup cannot be
// read at tc, and host-network pods share the node's class. kubepods is the kubelet's
// kubepods cgroup relative to cgroupRoot, empty to look for the usual names.
func HostNetworkCgroups(cgroupRoot, kubepods string) func(*corev1.Pod) uint64 {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		return nil
	}
	h := cgroups.Hierarchy{Dir: cgroupRoot, Version: cgroups.V2}
	return func(pod *corev1.Pod) uint64 {
		k, err := cgroups.FindKubepods(h, kubepods)
		if err != nil {
			return 0
		}
		dir, ok := k.PodDir(string(pod.UID))
		if !ok {
			return 0
		}
		var st unix.Stat_t
		if unix.Stat(dir, &st) != nil {
			return 0
		}
		return st.Ino
	}
}
