package cgroups

import (
	"slices"
	"strings"
	"testing"
)

// FuzzPodUID: the names of directories under kubepods, which anything that may make
// cgroups on the node can choose. Whatever they are, PodUID never panics and gives only
// a pod UID; and the names the kubelet gives a pod's cgroup, under either driver and in
// every QoS class, all read back as that pod's UID.
func FuzzPodUID(f *testing.F) {
	for _, s := range []string{
		"pod0b8c6a8e-5b3e-4c1a-9c6e-2f1d3a4b5c6d",
		"kubepods-burstable-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice",
		"kubepods-besteffort-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice",
		"kubepods-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice",
		"burstable", "kubepods-burstable.slice", "pod", "kubepods-pod.slice", "cri-containerd-abc.scope",
		"pod0B8C6A8E-5B3E-4C1A-9C6E-2F1D3A4B5C6D", "kubepods-besteffort-burstable-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice",
		"kubelet-kubepods-burstable-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice", "-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if uid, ok := PodUID(name); ok {
			if !isUID(uid) || !strings.Contains(strings.ReplaceAll(name, "_", "-"), uid) {
				t.Fatalf("PodUID(%q) = %q", name, uid)
			}
		}
		// name as a UID: the kubelet's names for it.
		if !isUID(name) {
			return
		}
		for _, k := range []*Kubepods{
			{Dir: "/sys/fs/cgroup/kubepods"},
			{Dir: "/sys/fs/cgroup/kubepods.slice", Systemd: true},
			{Dir: "/sys/fs/cgroup/kubelet.slice/kubelet-kubepods.slice", Systemd: true}, // --cgroup-root=/kubelet
		} {
			names := k.podDirNames(name)
			if len(names) != len(k.QoSDirs()) {
				t.Fatalf("%d names for %d QoS directories", len(names), len(k.QoSDirs()))
			}
			for _, n := range names {
				if uid, ok := PodUID(n); !ok || uid != name {
					t.Fatalf("PodUID(%q) = %q, %v; want %q (kubepods %s)", n, uid, ok, name, k.Dir)
				}
			}
			if slices.Contains(names, "") {
				t.Fatal("an empty name")
			}
		}
	})
}
