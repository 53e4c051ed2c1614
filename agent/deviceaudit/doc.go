// Package deviceaudit checks the device handshake against ground truth: what the
// kubelet itself assigned, read from its PodResources API, against what the ranker
// chose, each pod's devices.sextant.io/allocated.
//
// Every pass lists the kubelet's pods and their devices of the sextant.io/<kind>
// resources and
//   - returns, by PCI address, the pod holding each device: pods placed by another
//     scheduler included, so the ranker need not trust its own annotations alone;
//   - for each started pod carrying the annotation, compares: a device assigned that
//     the annotation does not list, or one listed and not assigned, is a mismatch. It
//     records a Warning event DeviceAllocationMismatch on the pod (one per pod, named
//     after it, so restarts and repeated passes add none) and counts
//     sextant_device_allocation_mismatches_total{resource} once per pod and resource.
//
// PodResources lists app containers and restartable init containers, not plain init
// containers: a listed device missing from the kubelet's answer is a mismatch only
// where no plain init container of the pod asks for that resource (it may hold the
// device itself).
package deviceaudit
