// Package dra is the agent as a DRA driver (resource.k8s.io/v1, through
// k8s.io/dynamic-resource-allocation/kubeletplugin): it publishes the node's devices
// of the kinds it serves as ResourceSlices, one pool named like the node, and prepares
// each allocated claim by writing a CDI spec that gives a container exactly the
// claim's devices.
//
// Every device carries the standard attributes resource.kubernetes.io/pciBusID,
// pcieRoot and numaNode (where the kernel knows them), and sextant's own kind, vendor,
// device, class and health. Devices the node keeps for itself (devicefilter) are not
// published; an unhealthy device is published with a NoSchedule taint, or left out
// where the API server drops taints. docs/devices.md describes the DRA path.
package dra
