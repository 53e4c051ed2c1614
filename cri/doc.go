// Package cri will hold the CRI client the agent uses to list, inspect and stop
// containers over containerd's socket (k8s.io/cri-api). It arrives with sidecar
// termination (issue 6); nothing uses it yet.
package cri
