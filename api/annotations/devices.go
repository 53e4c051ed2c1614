package annotations

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"sextant.io/sextant/api/v1alpha1"
)

// DevicesAllocated is what the ranker writes: a JSON map from resource name to the PCI
// addresses given to the pod, e.g. {"sextant.io/gpu":["0000:3b:00.0"]}. The agent hands
// the pod's containers exactly those devices.
const DevicesAllocated = "devices.sextant.io/allocated"

// Bounds of a devices.sextant.io/allocated value: no node has more devices than
// MaxAllocatedDevices, and that many addresses with their JSON fit in MaxAllocatedBytes.
const (
	MaxAllocatedBytes   = 64 << 10
	MaxAllocatedDevices = 4096
)

const allocationForm = `a JSON map from sextant.io/<gpu|nic|nvme|accelerator> to distinct PCI addresses, e.g. {"sextant.io/gpu":["0000:3b:00.0"]}`

// Allocation maps a resource name (sextant.io/<kind>) to the PCI addresses given to a
// pod. It is the JSON of devices.sextant.io/allocated.
type Allocation map[corev1.ResourceName][]string

// ParseAllocation parses a devices.sextant.io/allocated value. It accepts only
// requestable kinds, well-formed PCI addresses and no address twice, within
// MaxAllocatedBytes and MaxAllocatedDevices.
func ParseAllocation(value string) (Allocation, error) {
	fail := func(problem string) (Allocation, error) {
		return nil, fmt.Errorf("annotation %s=%q: %s; the accepted form is %s", DevicesAllocated, truncate(value), problem, allocationForm)
	}
	if len(value) > MaxAllocatedBytes {
		return fail(fmt.Sprintf("longer than %d bytes", MaxAllocatedBytes))
	}
	var a Allocation
	if err := json.Unmarshal([]byte(value), &a); err != nil {
		return fail("not a JSON map of string lists")
	}
	seen := make(map[string]bool)
	for name, ids := range a {
		if _, ok := v1alpha1.DeviceKindOf(name); !ok {
			return fail(fmt.Sprintf("%q is not a device resource", truncate(string(name))))
		}
		for _, id := range ids {
			if !IsPCIAddress(id) {
				return fail(fmt.Sprintf("%q is not a PCI address", truncate(id)))
			}
			if seen[id] {
				return fail(fmt.Sprintf("%s is listed twice", id))
			}
			seen[id] = true
			if len(seen) > MaxAllocatedDevices {
				return fail(fmt.Sprintf("more than %d devices", MaxAllocatedDevices))
			}
		}
	}
	return a, nil
}

// String is the annotation value: JSON, keys and addresses sorted.
func (a Allocation) String() string {
	sorted := make(Allocation, len(a))
	for k, ids := range a {
		sorted[k] = slices.Sorted(slices.Values(ids))
	}
	b, _ := json.Marshal(sorted) // a map of string slices always encodes
	return string(b)
}

// IsPCIAddress reports whether s is a PCI address as sysfs names it,
// domain:bus:device.function in lower-case hex (0000:3b:00.0); domains may have up to
// eight digits, as on hosts with VMD.
func IsPCIAddress(s string) bool {
	n := len(s)
	if n < 12 || n > 16 {
		return false
	}
	dom := n - 8 // "bb:dd.f" and the colon after the domain are 8 characters
	for i := 0; i < n; i++ {
		c := s[i]
		switch {
		case i == dom || i == n-5:
			if c != ':' {
				return false
			}
		case i == n-2:
			if c != '.' {
				return false
			}
		case i == n-1:
			if c < '0' || c > '7' {
				return false
			}
		case !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f'):
			return false
		}
	}
	return true
}
