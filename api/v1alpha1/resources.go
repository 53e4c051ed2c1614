package v1alpha1

import corev1 "k8s.io/api/core/v1"

// ResourcePrefix is the prefix of the extended resources devices are requested as:
// sextant.io/<kind>.
const ResourcePrefix = "sextant.io/"

// RequestableDeviceKinds are the kinds a pod can request; a kind's index here is its
// index wherever a fixed-size array per kind is kept.
var RequestableDeviceKinds = [...]DeviceKind{KindGPU, KindNIC, KindNVMe, KindAccelerator}

// ResourceName is the extended resource k is requested as, e.g. sextant.io/gpu.
func (k DeviceKind) ResourceName() corev1.ResourceName {
	return corev1.ResourceName(ResourcePrefix + string(k))
}

// DeviceKindOf returns the requestable kind a resource name stands for; ok is false for
// every other resource, sextant.io/other included.
func DeviceKindOf(name corev1.ResourceName) (DeviceKind, bool) {
	for _, k := range RequestableDeviceKinds {
		if k.ResourceName() == name {
			return k, true
		}
	}
	return "", false
}
