package deviceplugin

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const nodeTree = "testdata/node"

func TestFindDeviceNodes(t *testing.T) {
	dev := filepath.Join(nodeTree, "dev")
	tests := []struct {
		addr        string
		own, shared string // comma-separated
	}{
		{"0000:3b:00.0", "dri/renderD128,nvidia0", "nvidia-uvm,nvidiactl"},
		{"0000:af:00.0", "nvidia1", "nvidia-uvm,nvidiactl"},
		{"0000:86:00.0", "", ""}, // render node missing from /dev; card1 is never handed out
		{"0000:5e:00.0", "vfio/42", "vfio/vfio"},
		{"0000:5e:00.1", "infiniband/uverbs0", "infiniband/rdma_cm"},
		{"0000:d8:00.0", "ng1n1,nvme1,nvme1n1,nvme1n1p1", ""},
		{"0000:9a:00.0", "accel/accel0", ""},
		{"0000:00:1f.0", "", ""},
		{"0000:ff:00.0", "", ""}, // not on this node
	}
	for _, tt := range tests {
		n, warnings := FindDeviceNodes(nodeTree, dev, tt.addr)
		if len(warnings) != 0 {
			t.Errorf("%s: warnings %v", tt.addr, warnings)
		}
		if got := strings.Join(n.Own, ","); got != tt.own {
			t.Errorf("%s: own nodes %q, want %q", tt.addr, got, tt.own)
		}
		if got := strings.Join(n.Shared, ","); got != tt.shared {
			t.Errorf("%s: shared nodes %q, want %q", tt.addr, got, tt.shared)
		}
	}
}

// Without the host's /dev there is nothing to hand out, and that is no error.
func TestFindDeviceNodesWithoutDev(t *testing.T) {
	n, warnings := FindDeviceNodes(nodeTree, filepath.Join(t.TempDir(), "dev"), "0000:3b:00.0")
	if len(n.Own)+len(n.Shared) != 0 || len(warnings) != 0 {
		t.Errorf("nodes %s, warnings %v; want none", n.describe(), warnings)
	}
}

func TestMatchCDI(t *testing.T) {
	specs, warnings := loadCDI([]string{filepath.Join(nodeTree, "etc/cdi"), filepath.Join(nodeTree, "var/run/cdi"), filepath.Join(nodeTree, "missing")})
	if len(warnings) != 1 || !strings.Contains(warnings[0].Error(), "broken.json") {
		t.Errorf("warnings %v, want one naming broken.json", warnings)
	}
	if len(specs) != 5 {
		t.Errorf("%d CDI devices, want 5", len(specs))
	}
	gpu0, gpu1 := []string{"/dev/dri/renderD128", "/dev/nvidia0"}, []string{"/dev/nvidia1"}
	others := func(own ...[]string) map[string]bool {
		m := map[string]bool{}
		for _, o := range own {
			for _, n := range o {
				m[n] = true
			}
		}
		return m
	}
	tests := []struct {
		addr   string
		own    []string
		others map[string]bool
		want   string
	}{
		{"0000:3b:00.0", gpu0, others(gpu1), "nvidia.com/gpu=0"},
		{"0000:af:00.0", gpu1, others(gpu0), "nvidia.com/gpu=1"},
		// Alone on the node, the "all" device stands for this GPU too.
		{"0000:af:00.0", gpu1, others(), "nvidia.com/gpu=1,nvidia.com/gpu=all"},
		{"0000:5e:00.0", []string{"/dev/vfio/42"}, others(), "example.com/nic=0000:5e:00.0"},
		{"0000:9a:00.0", []string{"/dev/accel/accel0"}, others(), "example.com/accel=card-a"},
		{"0000:d8:00.0", []string{"/dev/nvme1"}, others(), ""},
	}
	for _, tt := range tests {
		if got := strings.Join(matchCDI(specs, tt.addr, tt.own, tt.others), ","); got != tt.want {
			t.Errorf("%s: CDI devices %q, want %q", tt.addr, got, tt.want)
		}
	}
	if !slices.ContainsFunc(specs, func(d cdiDevice) bool { return d.qualified == "nvidia.com/gpu=all" }) {
		t.Error("the all device was not read")
	}
}
