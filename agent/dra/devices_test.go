package dra

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"sextant.io/sextant/api/v1alpha1"
)

func TestPCIeRoot(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"0000:00:01.0", "pci0000:00"},
		{"0001:80:03.1", "pci0001:80"},
		{"pci0000:3a", "pci0000:3a"},
		{"", ""},
		{"garbage", ""},
	} {
		if got := PCIeRoot(tt.in); got != tt.want {
			t.Errorf("PCIeRoot(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestDeviceName(t *testing.T) {
	if got := DeviceName(v1alpha1.KindAccelerator, "0000:3b:00.0"); got != "accelerator-0000-3b-00-0" {
		t.Errorf("DeviceName = %q", got)
	}
}

func TestDevices(t *testing.T) {
	numa := func(n int32) *int32 { return &n }
	devs := []v1alpha1.PCIDevice{
		{Address: "0000:af:00.0", Kind: v1alpha1.KindAccelerator, Vendor: "0x8086", Device: "0x0b25", Class: "0x120000", NUMANode: numa(1), PCIeRoot: "0000:ae:00.0", Health: v1alpha1.Healthy},
		{Address: "0000:3b:00.0", Kind: v1alpha1.KindAccelerator, Vendor: "0x8086", Device: "0x0b25", Class: "0x120000", NUMANode: numa(0), PCIeRoot: "pci0000:3a", Health: v1alpha1.Healthy},
		{Address: "0000:3c:00.0", Kind: v1alpha1.KindAccelerator, Vendor: "0x8086", Device: "0x0b25", Class: "0x120000", Health: v1alpha1.Unhealthy},
		{Address: "0000:5e:00.0", Kind: v1alpha1.KindNIC, Vendor: "0x15b3", Device: "0x1017", Class: "0x020000", NUMANode: numa(0), Health: v1alpha1.Healthy},
		{Address: "0000:5f:00.0", Kind: v1alpha1.KindGPU, Vendor: "0x10de", Device: "0x20b0", Class: "0x030200", NUMANode: numa(0), Health: v1alpha1.Healthy},
	}
	excluded := map[string]string{"0000:5e:00.0": "carries the node's address"}
	attrs := func(addr, root string, node *int64, health string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			PCIBusIDAttribute: {StringValue: ptr.To(addr)},
			KindAttribute:     {StringValue: ptr.To("accelerator")},
			VendorAttribute:   {StringValue: ptr.To("0x8086")},
			DeviceAttribute:   {StringValue: ptr.To("0x0b25")},
			ClassAttribute:    {StringValue: ptr.To("0x120000")},
			HealthAttribute:   {StringValue: ptr.To(health)},
		}
		if root != "" {
			a[PCIeRootAttribute] = resourceapi.DeviceAttribute{StringValue: ptr.To(root)}
		}
		if node != nil {
			a[NUMANodeAttribute] = resourceapi.DeviceAttribute{IntValue: node}
		}
		return a
	}
	healthy := []resourceapi.Device{
		{Name: "accelerator-0000-3b-00-0", Attributes: attrs("0000:3b:00.0", "pci0000:3a", ptr.To[int64](0), "Healthy")},
	}
	unhealthy := resourceapi.Device{
		Name: "accelerator-0000-3c-00-0", Attributes: attrs("0000:3c:00.0", "", nil, "Unhealthy"),
		Taints: []resourceapi.DeviceTaint{{Key: UnhealthyTaintKey, Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
	}
	last := resourceapi.Device{Name: "accelerator-0000-af-00-0", Attributes: attrs("0000:af:00.0", "pci0000:ae", ptr.To[int64](1), "Healthy")}

	for _, tt := range []struct {
		name       string
		kinds      []v1alpha1.DeviceKind
		withTaints bool
		want       []resourceapi.Device
	}{
		{"accelerators with the unhealthy one tainted", []v1alpha1.DeviceKind{v1alpha1.KindAccelerator}, true, append(append(healthy, unhealthy), last)},
		{"accelerators without taints leave the unhealthy one out", []v1alpha1.DeviceKind{v1alpha1.KindAccelerator}, false, append(healthy[:1:1], last)},
		{"an excluded NIC is not published", []v1alpha1.DeviceKind{v1alpha1.KindNIC}, true, nil},
		{"a kind not served is not published", []v1alpha1.DeviceKind{v1alpha1.KindNVMe}, true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Devices(devs, excluded, tt.kinds, tt.withTaints)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Devices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChunk(t *testing.T) {
	if got := chunk(nil); len(got) != 1 || len(got[0]) != 0 {
		t.Errorf("chunk(nil) = %v, want one empty slice", got)
	}
	devs := make([]resourceapi.Device, 2*maxSliceDevices+1)
	got := chunk(devs)
	if len(got) != 3 || len(got[0]) != maxSliceDevices || len(got[2]) != 1 {
		t.Errorf("chunk of %d = %d slices of %d, %d, %d", len(devs), len(got), len(got[0]), len(got[1]), len(got[2]))
	}
}
