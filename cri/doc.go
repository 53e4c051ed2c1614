// Package cri is the container runtime client the agent uses on its node: it lists a
// pod's containers and stops them through the CRI (k8s.io/cri-api) on containerd's
// socket, and learns of container exits from containerd's own event service.
//
// CRI is the stop path on purpose: StopContainer goes through containerd's CRI plugin,
// the same state machine the kubelet drives, so the kubelet sees an ordinary container
// exit. containerd 1.6 does not implement the CRI's GetContainerEvents, so exits come
// from containerd's /tasks/exit events instead, on the same socket.
//
// Runtime is the small interface the sidecar terminator needs; Client implements it
// against a real socket and tests use a fake.
package cri
