// Package deviceplugin is the node side of the device-ID handshake: a kubelet device
// plugin (k8s.io/kubelet deviceplugin v1beta1) that hands each container exactly the
// devices the ranker wrote into its pod's devices.sextant.io/allocated.
//
// The Manager serves one endpoint per requestable kind the node has, resource
// sextant.io/<kind>, on <device-plugins dir>/sextant-<kind>.sock:
//
//   - ListAndWatch lists the kind's devices that may be handed out (devicefilter), the
//     PCI address as the ID, Healthy or Unhealthy as the topology Tracker judges them,
//     the NUMA node as TopologyInfo; it sends the list again on every change Update
//     brings.
//   - GetPreferredAllocation answers with the devices of the pod being admitted, found
//     by Prefer among the node's pods (the API does not name the pod).
//   - Allocate gives each container SEXTANT_<KIND>=<addresses>, the device nodes each
//     device has (FindDeviceNodes: VFIO group, NVMe controller and namespaces, DRM
//     render node, NVIDIA minor and control nodes, RDMA verbs, accel), and the CDI
//     devices that stand for it. Devices the ranker did not choose for the pod being
//     admitted are refused (CheckAllocation), which fails the pod's admission.
//
// The Manager registers each endpoint with the kubelet, again whenever the kubelet's
// socket is created anew (it restarted) or an endpoint's socket disappears (a starting
// kubelet wipes the directory), found through fsnotify and, in case an event is lost, a
// periodic check of both sockets' identity. A stale socket of an earlier agent is
// replaced. docs/devices.md describes the whole handshake and its limits.
package deviceplugin
