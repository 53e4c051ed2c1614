package topology

import (
	"strings"
	"testing"

	"sextant.io/sextant/api/v1alpha1"
)

// TestReadFaults checks the kernel's fault signals on the two-numa tree: the NVMe drive
// 0000:00:02.0 sits on the root bus, the NIC 0000:02:00.0 behind root port 0000:00:01.0,
// the GPU 0000:81:00.0 behind root port 0000:80:02.0.
func TestReadFaults(t *testing.T) {
	const (
		nvme   = "sys/devices/pci0000:00/0000:00:02.0/"
		port   = "sys/devices/pci0000:00/0000:00:01.0/"
		nic    = port + "0000:02:00.0/"
		gpu    = "sys/devices/pci0000:80/0000:80:02.0/0000:81:00.0/"
		gpuUp  = "sys/devices/pci0000:80/0000:80:02.0/"
		aerOK  = "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nMalfTLP 0\nTOTAL_ERR_FATAL 0\n"
		aerBad = "Undefined 0\nDLP 1\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 2\nMalfTLP 0\nTOTAL_ERR_FATAL 3\n"
	)
	link := func(dir, cur, max, curW, maxW string) func(string) error {
		return all(write(dir+"current_link_speed", cur), write(dir+"max_link_speed", max),
			write(dir+"current_link_width", curW), write(dir+"max_link_width", maxW))
	}
	tests := []struct {
		name   string
		mutate func(string) error
		// want maps each device address whose health is checked to the fault text it
		// must carry ("" for Healthy).
		want map[string]string
		warn string
	}{
		{name: "no signals at all",
			mutate: func(string) error { return nil },
			want:   map[string]string{"0000:00:02.0": "", "0000:02:00.0": "", "0000:81:00.0": ""}},
		{name: "AER counters at zero",
			mutate: all(write(nvme+"aer_dev_fatal", aerOK), write(nic+"aer_dev_fatal", aerOK)),
			want:   map[string]string{"0000:00:02.0": "", "0000:02:00.0": ""}},
		{name: "AER fatal errors",
			mutate: write(nvme+"aer_dev_fatal", aerBad),
			want:   map[string]string{"0000:00:02.0": "3 fatal uncorrectable errors", "0000:02:00.0": ""}},
		{name: "AER file without a total",
			mutate: write(nvme+"aer_dev_fatal", "DLP 1\n"),
			want:   map[string]string{"0000:00:02.0": ""},
			warn:   "0000:00:02.0/aer_dev_fatal"},
		{name: "AER on a device of kind other counts too",
			mutate: write("sys/devices/pci0000:00/0000:00:00.0/aer_dev_fatal", aerBad),
			want:   map[string]string{"0000:00:00.0": "fatal"}},
		{name: "link at full width and speed",
			mutate: link(nic, "8.0 GT/s PCIe", "8.0 GT/s PCIe", "4", "4"),
			want:   map[string]string{"0000:02:00.0": ""}},
		{name: "NIC link narrower than both ends can train",
			mutate: all(link(nic, "8.0 GT/s PCIe", "8.0 GT/s PCIe", "2", "4"), write(port+"max_link_width", "16")),
			want:   map[string]string{"0000:02:00.0": "x2 of x4"}},
		{name: "NIC link slower than both ends can train (old kernel format)",
			mutate: link(nic, "2.5 GT/s", "8 GT/s", "4", "4"),
			want:   map[string]string{"0000:02:00.0": "2.5 GT/s of 8 GT/s"}},
		{name: "x16 card in a x8 slot at Gen3 is what the slot allows",
			mutate: all(link(nic, "8.0 GT/s PCIe", "16.0 GT/s PCIe", "8", "16"),
				write(port+"max_link_width", "8"), write(port+"max_link_speed", "8.0 GT/s PCIe")),
			want: map[string]string{"0000:02:00.0": ""}},
		{name: "x16 card in a x8 slot trained at x4",
			mutate: all(link(nic, "16.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "16"), write(port+"max_link_width", "8")),
			want:   map[string]string{"0000:02:00.0": "x4 of x8"}},
		{name: "idle GPU at 2.5 GT/s is not a fault, a narrow GPU link is",
			mutate: all(link(gpu, "2.5 GT/s PCIe", "16.0 GT/s PCIe", "8", "16"), write(gpuUp+"max_link_width", "16")),
			want:   map[string]string{"0000:81:00.0": "x8 of x16"}},
		{name: "virtual function: unknown speed and width 0 are no data",
			mutate: link(nic, "Unknown", "8.0 GT/s PCIe", "0", "4"),
			want:   map[string]string{"0000:02:00.0": ""}},
		{name: "garbage width",
			mutate: link(nic, "8.0 GT/s PCIe", "8.0 GT/s PCIe", "wide", "4"),
			want:   map[string]string{"0000:02:00.0": ""},
			warn:   "0000:02:00.0/current_link_width"},
		{name: "garbage speed",
			mutate: link(nic, "fast", "8.0 GT/s PCIe", "4", "4"),
			want:   map[string]string{"0000:02:00.0": ""},
			warn:   "0000:02:00.0/current_link_speed"},
		{name: "two faults at once",
			mutate: all(write(nvme+"aer_dev_fatal", aerBad), link(nvme, "8.0 GT/s PCIe", "16.0 GT/s PCIe", "2", "4")),
			want:   map[string]string{"0000:00:02.0": "fatal|x2 of x4|8.0 GT/s of 16.0 GT/s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTree(t, "testdata/two-numa")
			if err := tt.mutate(dir); err != nil {
				t.Fatal(err)
			}
			s := mustRead(t, dir)
			if tt.warn != "" {
				wantWarnings(t, s, tt.warn)
			} else if len(s.Warnings) != 0 {
				t.Errorf("warnings: %v", s.Warnings)
			}
			for addr, want := range tt.want {
				d := device(s, addr)
				got := strings.Join(s.Faults[addr], "|")
				if want == "" {
					if d.Health != v1alpha1.Healthy || got != "" {
						t.Errorf("%s: %s, faults %q; want Healthy without faults", addr, d.Health, got)
					}
					continue
				}
				if d.Health != v1alpha1.Unhealthy {
					t.Errorf("%s: %s, want Unhealthy", addr, d.Health)
				}
				parts := strings.Split(want, "|")
				if len(parts) != len(s.Faults[addr]) {
					t.Errorf("%s: faults %q, want %d matching %q", addr, got, len(parts), want)
					continue
				}
				for i, p := range parts {
					if !strings.Contains(s.Faults[addr][i], p) {
						t.Errorf("%s: fault %d = %q, want it to contain %q", addr, i, s.Faults[addr][i], p)
					}
				}
			}
		})
	}
}
