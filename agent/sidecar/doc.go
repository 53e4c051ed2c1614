// Package sidecar stops the sidecar containers of short-lived pods once their main
// containers are done, so that a Job whose work finished also completes. Terminator
// applies the rules of package sidecarrules (api/sidecarrules) on one node: it watches
// that node's pods, learns of container exits from the runtime's events, reads the
// state of a pod's containers from the runtime (package cri) and stops sidecars through
// it.
package sidecar
