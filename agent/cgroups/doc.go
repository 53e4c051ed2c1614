// Package cgroups finds the kubelet's pod cgroups on a node and reads and narrows their
// cpusets: cgroup v1 (the cpuset hierarchy) and v2 (the unified hierarchy), under the
// kubelet's cgroupfs and systemd drivers. It also watches for pod cgroups being created,
// so a pod can be narrowed before its first container exists.
//
// The root (/sys/fs/cgroup on a node) is always a parameter, never hard-coded: tests
// run on fixture trees, and the agent in a container reads the host's hierarchy where
// it is mounted.
package cgroups
