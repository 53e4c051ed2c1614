// Package cri is the container runtime client the agent uses on its node: it lists a
// pod's containers and stops them through the CRI (k8s.io/cri-api) on containerd's
// socket, and learns of container exits from containerd's own event service.
//
// CRI is the stop path on purpose: StopContainer goes through containerd's CRI plugin,
// the same state machine the kubelet drives, so the kubelet sees an ordinary container
// exit. containerd 1.6 does not implement the CRI's GetContainerEvents, so exits come
// from containerd's /tasks/exit events instead, on the same socket.
//
// Every unary call carries a deadline (DefaultTimeout, or WithTimeout; the agent's
// --cri-timeout), put on in one interceptor so no method can miss it; StopContainer
// gets the grace period it passes on top. Connecting is bounded the same way. The
// exit stream is bounded only while it opens: it is meant to stay open and quiet.
//
// Runtime is the small interface the sidecar terminator needs; Client implements it
// against a real socket and tests use a fake.
package cri
