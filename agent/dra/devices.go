package dra

import (
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/v1alpha1"
)

// DriverName is the driver's name in ResourceSlices, DeviceClasses and claims'
// allocation results.
const DriverName = "sextant.io"

// The attributes every device carries. NUMANodeAttribute is the standard name; the
// helper for it is not in the dynamic-resource-allocation release the agent builds
// with.
const (
	PCIBusIDAttribute = deviceattribute.StandardDeviceAttributePCIBusID
	PCIeRootAttribute = deviceattribute.StandardDeviceAttributePCIeRoot
	NUMANodeAttribute = resourceapi.QualifiedName(deviceattribute.StandardDeviceAttributePrefix + "numaNode")

	KindAttribute     resourceapi.QualifiedName = "kind"
	VendorAttribute   resourceapi.QualifiedName = "vendor"
	DeviceAttribute   resourceapi.QualifiedName = "device"
	ClassAttribute    resourceapi.QualifiedName = "class"
	HealthAttribute   resourceapi.QualifiedName = "health"
	UnhealthyTaintKey                           = DriverName + "/unhealthy"
)

// maxSliceDevices is the most devices one ResourceSlice holds when a device carries a
// taint (the API's bound with advanced features); plain slices could hold 128.
const maxSliceDevices = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// DeviceName is the DRA name of the PCI function addr of kind: a DNS label, the kind
// and the address with ':' and '.' as '-' ("accelerator-0000-3b-00-0").
func DeviceName(kind v1alpha1.DeviceKind, addr string) string {
	return string(kind) + "-" + strings.NewReplacer(":", "-", ".", "-").Replace(addr)
}

// PCIeRoot is the standard pcieRoot value, pci<domain>:<bus> of the root complex, for
// the topology's PCIeRoot (a root port's address or the host bridge's name); "" when
// unknown.
func PCIeRoot(root string) string {
	if strings.HasPrefix(root, "pci") {
		return root
	}
	// A root port dddd:bb:dd.f sits on bus bb of the root complex pcidddd:bb.
	domain, rest, ok := strings.Cut(root, ":")
	bus, _, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || domain == "" || bus == "" {
		return ""
	}
	return "pci" + domain + ":" + bus
}

// Devices are the ResourceSlice devices for devs, the node's PCI functions: those of
// kinds that the node does not keep (excluded), in address order. An unhealthy device
// is tainted NoSchedule, or left out when withTaints is false.
func Devices(devs []v1alpha1.PCIDevice, excluded map[string]string, kinds []v1alpha1.DeviceKind, withTaints bool) []resourceapi.Device {
	var out []resourceapi.Device
	for _, d := range devs {
		if !slices.Contains(kinds, d.Kind) || excluded[d.Address] != "" {
			continue
		}
		healthy := d.Health == v1alpha1.Healthy
		if !healthy && !withTaints {
			continue
		}
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			PCIBusIDAttribute: {StringValue: ptr.To(d.Address)},
			KindAttribute:     {StringValue: ptr.To(string(d.Kind))},
			VendorAttribute:   {StringValue: ptr.To(d.Vendor)},
			DeviceAttribute:   {StringValue: ptr.To(d.Device)},
			ClassAttribute:    {StringValue: ptr.To(d.Class)},
			HealthAttribute:   {StringValue: ptr.To(string(d.Health))},
		}
		if r := PCIeRoot(d.PCIeRoot); r != "" {
			attrs[PCIeRootAttribute] = resourceapi.DeviceAttribute{StringValue: ptr.To(r)}
		}
		if d.NUMANode != nil {
			attrs[NUMANodeAttribute] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(*d.NUMANode))}
		}
		dev := resourceapi.Device{Name: DeviceName(d.Kind, d.Address), Attributes: attrs}
		if !healthy {
			dev.Taints = []resourceapi.DeviceTaint{{Key: UnhealthyTaintKey, Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
		out = append(out, dev)
	}
	slices.SortFunc(out, func(a, b resourceapi.Device) int {
		return compareAddress(*a.Attributes[PCIBusIDAttribute].StringValue, *b.Attributes[PCIBusIDAttribute].StringValue)
	})
	return out
}

// chunk splits devs into ResourceSlice-sized pieces; no devices is one empty slice,
// so that the pool exists and says the node has none.
func chunk(devs []resourceapi.Device) [][]resourceapi.Device {
	if len(devs) == 0 {
		return [][]resourceapi.Device{nil}
	}
	var out [][]resourceapi.Device
	for len(devs) > 0 {
		n := min(len(devs), maxSliceDevices)
		out = append(out, devs[:n])
		devs = devs[n:]
	}
	return out
}
