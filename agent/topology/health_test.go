package topology

import (
	"testing"

	"sextant.io/sextant/api/v1alpha1"
)

func TestTracker(t *testing.T) {
	gpu := v1alpha1.PCIDevice{Address: "0000:81:00.0", Kind: v1alpha1.KindGPU, Driver: "nvidia", NUMANode: ptr(1), Health: v1alpha1.Healthy}
	nic := v1alpha1.PCIDevice{Address: "0000:02:00.0", Kind: v1alpha1.KindNIC, Driver: "igb", Health: v1alpha1.Healthy}
	bridge := v1alpha1.PCIDevice{Address: "0000:00:00.0", Kind: v1alpha1.KindOther, Health: v1alpha1.Healthy}
	unbound := func(d v1alpha1.PCIDevice) v1alpha1.PCIDevice { d.Driver = ""; return d }
	rebound := func(d v1alpha1.PCIDevice, drv string) v1alpha1.PCIDevice { d.Driver = drv; return d }
	faulty := func(d v1alpha1.PCIDevice) v1alpha1.PCIDevice { d.Health = v1alpha1.Unhealthy; return d }

	type step struct {
		present []v1alpha1.PCIDevice
		want    map[string]v1alpha1.DeviceHealth
	}
	tests := []struct {
		name  string
		seed  []v1alpha1.PCIDevice
		steps []step
	}{
		{
			name: "device disappears and comes back",
			steps: []step{
				{[]v1alpha1.PCIDevice{gpu, nic}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Healthy", nic.Address: "Healthy"}},
				{[]v1alpha1.PCIDevice{nic}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Unhealthy", nic.Address: "Healthy"}},
				{[]v1alpha1.PCIDevice{nic}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Unhealthy", nic.Address: "Healthy"}},
				{[]v1alpha1.PCIDevice{gpu, nic}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Healthy", nic.Address: "Healthy"}},
			},
		},
		{
			name: "driver unbound, then bound to another driver",
			steps: []step{
				{[]v1alpha1.PCIDevice{gpu}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Healthy"}},
				{[]v1alpha1.PCIDevice{unbound(gpu)}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Unhealthy"}},
				{[]v1alpha1.PCIDevice{rebound(gpu, "vfio-pci")}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Healthy"}},
			},
		},
		{
			name: "device that never had a driver stays healthy",
			steps: []step{
				{[]v1alpha1.PCIDevice{bridge}, map[string]v1alpha1.DeviceHealth{bridge.Address: "Healthy"}},
				{[]v1alpha1.PCIDevice{bridge}, map[string]v1alpha1.DeviceHealth{bridge.Address: "Healthy"}},
			},
		},
		{
			name: "seed: a device gone while the agent was down",
			seed: []v1alpha1.PCIDevice{gpu, nic},
			steps: []step{
				{[]v1alpha1.PCIDevice{nic}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Unhealthy", nic.Address: "Healthy"}},
			},
		},
		{
			name: "seed: a driver unbound while the agent was down",
			seed: []v1alpha1.PCIDevice{gpu},
			steps: []step{
				{[]v1alpha1.PCIDevice{unbound(gpu)}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Unhealthy"}},
			},
		},
		{
			name: "seed: published unhealthy (disabled) stays so until a driver is back",
			seed: []v1alpha1.PCIDevice{func() v1alpha1.PCIDevice { d := unbound(gpu); d.Health = v1alpha1.Unhealthy; return d }()},
			steps: []step{
				{[]v1alpha1.PCIDevice{unbound(gpu)}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Unhealthy"}},
				{[]v1alpha1.PCIDevice{gpu}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Healthy"}},
			},
		},
		{
			name: "a fault the read reports, then cleared",
			steps: []step{
				{[]v1alpha1.PCIDevice{gpu}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Healthy"}},
				{[]v1alpha1.PCIDevice{faulty(gpu)}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Unhealthy"}},
				{[]v1alpha1.PCIDevice{gpu}, map[string]v1alpha1.DeviceHealth{gpu.Address: "Healthy"}},
			},
		},
		{
			name: "a fault on a device without a driver",
			steps: []step{
				{[]v1alpha1.PCIDevice{faulty(bridge)}, map[string]v1alpha1.DeviceHealth{bridge.Address: "Unhealthy"}},
			},
		},
		{
			name: "seed entries without an address are ignored",
			seed: []v1alpha1.PCIDevice{{}},
			steps: []step{
				{nil, map[string]v1alpha1.DeviceHealth{}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(tt.seed)
			for i, s := range tt.steps {
				got := tr.Update(s.present)
				if len(got) != len(s.want) {
					t.Fatalf("step %d: %d devices %s, want %d", i, len(got), js(got), len(s.want))
				}
				for j, d := range got {
					if j > 0 && comparePCIAddress(got[j-1].Address, d.Address) >= 0 {
						t.Errorf("step %d: not sorted: %s", i, js(got))
					}
					if d.Health != s.want[d.Address] {
						t.Errorf("step %d: %s is %s, want %s", i, d.Address, d.Health, s.want[d.Address])
					}
				}
			}
		})
	}
}

// A vanished device keeps what was last known of it, so the ranker still knows its kind
// and NUMA node when it is listed as Unhealthy.
func TestTrackerKeepsLastRecord(t *testing.T) {
	gpu := v1alpha1.PCIDevice{Address: "0000:81:00.0", Class: "0x030200", Kind: v1alpha1.KindGPU, Driver: "nvidia", NUMANode: ptr(1)}
	tr := NewTracker(nil)
	tr.Update([]v1alpha1.PCIDevice{gpu})
	got := tr.Update(nil)
	want := gpu
	want.Health = v1alpha1.Unhealthy
	if len(got) != 1 || js(got[0]) != js(want) {
		t.Errorf("got %s, want %s", js(got), js(want))
	}
}
