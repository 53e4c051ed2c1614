package topology

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/internal/fixture"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestReadGolden pins the exact JSON the agent publishes for each small tree.
func TestReadGolden(t *testing.T) {
	for _, tree := range []string{"two-numa", "no-numa", "memory-tier", "offline-cpus", "numa-inference", "dangling-symlink"} {
		t.Run(tree, func(t *testing.T) {
			snap, err := Read(filepath.Join("testdata", tree))
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(snap.Topology, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", tree+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("topology of %s differs from %s:\n%s", tree, golden, got)
			}
		})
	}
}

func TestReadTwoNUMA(t *testing.T) {
	snap := mustRead(t, "testdata/two-numa")
	topo := snap.Topology
	if len(snap.Warnings) != 0 {
		t.Errorf("warnings: %v", snap.Warnings)
	}
	wantNodes := []v1alpha1.NUMANode{
		{ID: 0, CPUs: seq(0, 7), MemoryBytes: 16 << 30, Distances: []int32{10, 21}},
		{ID: 1, CPUs: seq(8, 15), MemoryBytes: 16 << 30, Distances: []int32{21, 10}},
	}
	if !jsonEqual(topo.NUMANodes, wantNodes) {
		t.Errorf("NUMA nodes = %s, want %s", js(topo.NUMANodes), js(wantNodes))
	}
	type dev struct {
		kind   string
		node   *int32
		driver string
		root   string
	}
	want := map[string]dev{
		"0000:00:00.0": {"other", ptr(0), "", "pci0000:00"},
		"0000:00:02.0": {"nvme", ptr(0), "nvme", "pci0000:00"},
		"0000:02:00.0": {"nic", ptr(0), "igb", "0000:00:01.0"},
		"0000:80:04.0": {"accelerator", ptr(1), "", "pci0000:80"},
		"0000:81:00.0": {"gpu", ptr(1), "nvidia", "0000:80:02.0"},
		"0000:82:00.0": {"gpu", ptr(1), "nvidia", "0000:80:03.0"},
	}
	var addrs []string
	for _, d := range topo.PCIDevices {
		addrs = append(addrs, d.Address)
		w, ok := want[d.Address]
		if !ok {
			t.Errorf("unexpected device %s (PCI-to-PCI bridges are left out)", d.Address)
			continue
		}
		got := dev{string(d.Kind), d.NUMANode, d.Driver, d.PCIeRoot}
		if js(got) != js(w) || d.Health != v1alpha1.Healthy {
			t.Errorf("device %s = %s %s, want %s", d.Address, js(got), d.Health, js(w))
		}
	}
	if !slices.IsSorted(addrs) || len(addrs) != len(want) {
		t.Errorf("devices = %v, want the %d of %v sorted", addrs, len(want), want)
	}
	wantNICs := []v1alpha1.NIC{
		{Name: "br0"},
		{Name: "eth0", PCIAddress: ptrS("0000:02:00.0"), NUMANode: ptr(0), SpeedMbps: ptr64(10000)},
		{Name: "veth0", SpeedMbps: ptr64(10000)},
	}
	if !jsonEqual(topo.NICs, wantNICs) {
		t.Errorf("NICs = %s, want %s (lo left out)", js(topo.NICs), js(wantNICs))
	}
}

// TestReadCases checks one aspect of each small tree.
func TestReadCases(t *testing.T) {
	tests := []struct {
		tree  string
		check func(t *testing.T, s *Snapshot)
	}{
		{"no-numa", func(t *testing.T, s *Snapshot) {
			// No sys/devices/system/node: one node 0, every online CPU, proc's MemTotal,
			// and every device on it.
			want := []v1alpha1.NUMANode{{ID: 0, CPUs: seq(0, 3), MemoryBytes: 8046524 * 1024}}
			if !jsonEqual(s.Topology.NUMANodes, want) {
				t.Errorf("NUMA nodes = %s, want %s", js(s.Topology.NUMANodes), js(want))
			}
			if n := s.Topology.PCIDevices[0].NUMANode; n == nil || *n != 0 {
				t.Errorf("device NUMA node = %v, want 0", n)
			}
			// virtio-net: the device link points at virtio0, under the PCI function.
			nic := s.Topology.NICs[0]
			if nic.PCIAddress == nil || *nic.PCIAddress != "0000:00:03.0" || nic.NUMANode == nil || *nic.NUMANode != 0 {
				t.Errorf("eth0 = %s, want on 0000:00:03.0, node 0", js(nic))
			}
		}},
		{"memory-tier", func(t *testing.T, s *Snapshot) {
			n := s.Topology.NUMANodes[1]
			if n.ID != 1 || n.CPUs == nil || len(n.CPUs) != 0 || n.MemoryBytes != 4<<30 {
				t.Errorf("CPU-less node = %s, want id 1, cpus [], 4 GiB", js(n))
			}
			if b, _ := json.Marshal(n); !strings.Contains(string(b), `"cpus":[]`) {
				t.Errorf("CPU-less node serializes as %s, want cpus []", b)
			}
		}},
		{"offline-cpus", func(t *testing.T, s *Snapshot) {
			got := [][]int32{s.Topology.NUMANodes[0].CPUs, s.Topology.NUMANodes[1].CPUs}
			want := [][]int32{{0, 2, 3}, {4, 5, 6}}
			if js(got) != js(want) {
				t.Errorf("online CPUs per node = %v, want %v", got, want)
			}
		}},
		{"numa-inference", func(t *testing.T, s *Snapshot) {
			want := map[string]*int32{
				"0000:00:02.0": ptr(0), // own local_cpulist
				"0000:41:00.0": ptr(1), // own local_cpus mask
				"0000:42:00.0": ptr(1), // parent bridge's local_cpulist
				"0000:60:00.0": ptr(0), // root bus cpulistaffinity
				"0000:00:1f.0": nil,    // local to both nodes
				"0000:7f:08.0": nil,    // empty local_cpulist, nothing above
			}
			for _, d := range s.Topology.PCIDevices {
				if w, ok := want[d.Address]; !ok || js(d.NUMANode) != js(w) {
					t.Errorf("device %s NUMA node = %s, want %s", d.Address, js(d.NUMANode), js(w))
				}
			}
		}},
		{"dangling-symlink", func(t *testing.T, s *Snapshot) {
			if len(s.Topology.PCIDevices) != 1 || s.Topology.PCIDevices[0].Address != "0000:00:03.0" {
				t.Errorf("devices = %s, want only 0000:00:03.0", js(s.Topology.PCIDevices))
			}
			nic := s.Topology.NICs[0]
			if nic.Name != "eth1" || nic.PCIAddress != nil {
				t.Errorf("NIC = %s, want eth1 without a PCI address", js(nic))
			}
			wantWarnings(t, s, "sys/bus/pci/devices/0000:00:04.0", "net/eth1/device")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.tree, func(t *testing.T) {
			tt.check(t, mustRead(t, filepath.Join("testdata", tt.tree)))
		})
	}
}

// TestReadMalformed checks that bad content fails naming the file, or becomes "no data"
// with a warning naming it; never a panic or a silently wrong topology.
func TestReadMalformed(t *testing.T) {
	tests := []struct {
		name    string
		tree    string
		mutate  func(dir string) error
		wantErr string // a failure naming this file
		warn    string // or a warning naming this file
		check   func(t *testing.T, s *Snapshot)
	}{
		{name: "garbage cpulist", tree: "malformed-cpulist", wantErr: "node0/cpulist"},
		{name: "truncated meminfo", tree: "truncated-meminfo", wantErr: "node0/meminfo"},
		{name: "missing node meminfo", tree: "two-numa",
			mutate:  rm("sys/devices/system/node/node1/meminfo"),
			wantErr: "node1/meminfo"},
		{name: "garbage online list", tree: "two-numa",
			mutate:  write("sys/devices/system/cpu/online", "0-15,banana\n"),
			wantErr: "cpu/online"},
		{name: "empty online list", tree: "two-numa",
			mutate:  write("sys/devices/system/cpu/online", "\n"),
			wantErr: "cpu/online"},
		{name: "garbage per-CPU online", tree: "offline-cpus",
			mutate: all(rm("sys/devices/system/cpu/online"),
				write("sys/devices/system/cpu/cpu3/online", "yes\n")),
			wantErr: "cpu3/online"},
		{name: "per-CPU online without cpu/online", tree: "offline-cpus",
			mutate: rm("sys/devices/system/cpu/online"),
			check: func(t *testing.T, s *Snapshot) {
				// cpu0 has no online file (it cannot be offlined); cpu1 and cpu7 read 0.
				got := [][]int32{s.Topology.NUMANodes[0].CPUs, s.Topology.NUMANodes[1].CPUs}
				if want := [][]int32{{0, 2, 3}, {4, 5, 6}}; js(got) != js(want) {
					t.Errorf("CPUs = %v, want %v", got, want)
				}
			}},
		{name: "no proc/meminfo and no nodes", tree: "no-numa",
			mutate:  rm("proc/meminfo"),
			wantErr: "proc/meminfo"},
		{name: "garbage numa_node", tree: "two-numa",
			mutate: write("sys/devices/pci0000:80/0000:80:02.0/0000:81:00.0/numa_node", "one\n"),
			warn:   "0000:81:00.0/numa_node",
			check: func(t *testing.T, s *Snapshot) {
				// Falls back to local_cpulist 8-15.
				if n := device(s, "0000:81:00.0").NUMANode; n == nil || *n != 1 {
					t.Errorf("NUMA node = %v, want 1 from local_cpulist", n)
				}
			}},
		{name: "numa_node of a node that does not exist", tree: "two-numa",
			mutate: all(write("sys/devices/pci0000:80/0000:80:02.0/0000:81:00.0/numa_node", "7\n"),
				write("sys/devices/pci0000:80/0000:80:02.0/0000:81:00.0/local_cpulist", "0-15\n")),
			warn: "0000:81:00.0/numa_node",
			check: func(t *testing.T, s *Snapshot) {
				if n := device(s, "0000:81:00.0").NUMANode; n != nil {
					t.Errorf("NUMA node = %d, want null (local to both nodes)", *n)
				}
			}},
		{name: "garbage local_cpulist", tree: "numa-inference",
			mutate: write("sys/devices/pci0000:00/0000:00:02.0/local_cpulist", "0-3,,\n"),
			warn:   "0000:00:02.0/local_cpulist",
			check: func(t *testing.T, s *Snapshot) {
				if n := device(s, "0000:00:02.0").NUMANode; n != nil {
					t.Errorf("NUMA node = %d, want null", *n)
				}
			}},
		{name: "garbage class", tree: "two-numa",
			mutate: write("sys/devices/pci0000:00/0000:00:02.0/class", "nvme\n"),
			warn:   "0000:00:02.0/class",
			check:  func(t *testing.T, s *Snapshot) { noDevice(t, s, "0000:00:02.0") }},
		{name: "missing vendor", tree: "two-numa",
			mutate: rm("sys/devices/pci0000:00/0000:00:02.0/vendor"),
			warn:   "0000:00:02.0/vendor",
			check:  func(t *testing.T, s *Snapshot) { noDevice(t, s, "0000:00:02.0") }},
		{name: "garbage distance", tree: "two-numa",
			mutate: write("sys/devices/system/node/node1/distance", "21 ten\n"),
			warn:   "node1/distance",
			check: func(t *testing.T, s *Snapshot) {
				if d := s.Topology.NUMANodes[1].Distances; d != nil {
					t.Errorf("distances = %v, want none", d)
				}
			}},
		{name: "distances that do not line up", tree: "two-numa",
			mutate: write("sys/devices/system/node/node1/distance", "21 10 10\n"),
			warn:   "node1/distance",
			check: func(t *testing.T, s *Snapshot) {
				for _, n := range s.Topology.NUMANodes {
					if n.Distances != nil {
						t.Errorf("node %d distances = %v, want none at all", n.ID, n.Distances)
					}
				}
			}},
		{name: "CPU in two nodes", tree: "two-numa",
			mutate: write("sys/devices/system/node/node1/cpulist", "0-15\n"),
			warn:   "sys/devices/system/node",
			check: func(t *testing.T, s *Snapshot) {
				want := []v1alpha1.NUMANode{{ID: 0, CPUs: seq(0, 15), MemoryBytes: 32 << 30}}
				if !jsonEqual(s.Topology.NUMANodes, want) {
					t.Errorf("NUMA nodes = %s, want %s", js(s.Topology.NUMANodes), js(want))
				}
			}},
		{name: "dangling driver link", tree: "two-numa",
			mutate: rm("sys/bus/pci/drivers/igb"),
			check: func(t *testing.T, s *Snapshot) {
				// The link's own target names the driver.
				if d := device(s, "0000:02:00.0"); d.Driver != "igb" {
					t.Errorf("driver = %q, want igb", d.Driver)
				}
			}},
		{name: "symlink loop", tree: "two-numa",
			mutate: func(dir string) error {
				p := filepath.Join(dir, "sys/bus/pci/devices/0000:00:09.0")
				return os.Symlink("0000:00:09.0", p)
			},
			warn:  "0000:00:09.0",
			check: func(t *testing.T, s *Snapshot) { noDevice(t, s, "0000:00:09.0") }},
		{name: "absolute symlink stays in the root", tree: "two-numa",
			mutate: func(dir string) error {
				p := filepath.Join(dir, "sys/bus/pci/devices/0000:02:00.0")
				if err := os.Remove(p); err != nil {
					return err
				}
				return os.Symlink("/sys/devices/pci0000:00/0000:00:01.0/0000:02:00.0", p)
			},
			check: func(t *testing.T, s *Snapshot) {
				if d := device(s, "0000:02:00.0"); d.Kind != v1alpha1.KindNIC || d.PCIeRoot != "0000:00:01.0" {
					t.Errorf("device = %s", js(d))
				}
			}},
		{name: "absolute interface link stays in the root", tree: "two-numa",
			mutate: func(dir string) error {
				p := filepath.Join(dir, "sys/class/net/eth0")
				if err := os.Remove(p); err != nil {
					return err
				}
				return os.Symlink("/sys/devices/pci0000:00/0000:00:01.0/0000:02:00.0/net/eth0", p)
			},
			check: func(t *testing.T, s *Snapshot) {
				want := `{"name":"eth0","pciAddress":"0000:02:00.0","numaNode":0,"speedMbps":10000}`
				if got := js(s.Topology.NICs[1]); got != want {
					t.Errorf("eth0 = %s, want %s", got, want)
				}
			}},
		{name: "dangling interface link", tree: "two-numa",
			mutate: func(dir string) error {
				return os.Symlink("../../devices/virtual/net/gone0", filepath.Join(dir, "sys/class/net/gone0"))
			},
			warn: "net/gone0",
			check: func(t *testing.T, s *Snapshot) {
				if len(s.Topology.NICs) != 3 {
					t.Errorf("NICs = %s, want br0, eth0, veth0", js(s.Topology.NICs))
				}
			}},
		{name: "NUL-padded and empty files", tree: "two-numa",
			mutate: all(write("sys/devices/system/node/node0/cpulist", "0-7\n\x00"),
				write("sys/class/net/eth0/speed", "")),
			check: func(t *testing.T, s *Snapshot) {
				if c := s.Topology.NUMANodes[0].CPUs; !slices.Equal(c, seq(0, 7)) {
					t.Errorf("CPUs = %v", c)
				}
			}},
		{name: "no sys at all", tree: "no-numa",
			mutate: func(dir string) error { return os.RemoveAll(filepath.Join(dir, "sys")) },
			check: func(t *testing.T, s *Snapshot) {
				// Nothing says which CPUs exist: one node with memory and no CPUs,
				// rather than invented ones.
				want := []v1alpha1.NUMANode{{ID: 0, CPUs: []int32{}, MemoryBytes: 8046524 * 1024}}
				if !jsonEqual(s.Topology.NUMANodes, want) || len(s.Topology.PCIDevices) != 0 || len(s.Topology.NICs) != 0 {
					t.Errorf("topology = %s", js(s.Topology))
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join("testdata", tt.tree)
			if tt.mutate != nil {
				dir = copyTree(t, dir)
				if err := tt.mutate(dir); err != nil {
					t.Fatal(err)
				}
			}
			snap, err := Read(dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Read error = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.warn != "" {
				wantWarnings(t, snap, tt.warn)
			}
			if tt.check != nil {
				tt.check(t, snap)
			}
		})
	}
}

func TestReadMissingRoot(t *testing.T) {
	if _, err := Read(filepath.Join(t.TempDir(), "nothing")); err == nil || !strings.Contains(err.Error(), "proc/meminfo") {
		t.Errorf("Read of a missing root: %v, want an error naming proc/meminfo", err)
	}
}

func mustRead(t *testing.T, dir string) *Snapshot {
	t.Helper()
	s, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantWarnings(t *testing.T, s *Snapshot, files ...string) {
	t.Helper()
	for _, f := range files {
		if !slices.ContainsFunc(s.Warnings, func(w error) bool { return strings.Contains(w.Error(), f) }) {
			t.Errorf("no warning naming %s; warnings: %v", f, s.Warnings)
		}
	}
}

func device(s *Snapshot, addr string) v1alpha1.PCIDevice {
	for _, d := range s.Topology.PCIDevices {
		if d.Address == addr {
			return d
		}
	}
	return v1alpha1.PCIDevice{}
}

func noDevice(t *testing.T, s *Snapshot, addr string) {
	t.Helper()
	if device(s, addr).Address != "" {
		t.Errorf("device %s is listed, want it left out", addr)
	}
}

// copyTree copies a testdata tree into a new directory, so a test can change it.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	fixture.CopyTree(t, src, dst)
	return dst
}

func write(rel, content string) func(string) error {
	return func(dir string) error { return os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644) }
}

func rm(rel string) func(string) error {
	return func(dir string) error {
		p := filepath.Join(dir, rel)
		if _, err := os.Lstat(p); err != nil {
			return err
		}
		return os.RemoveAll(p)
	}
}

func all(fns ...func(string) error) func(string) error {
	return func(dir string) error {
		for _, f := range fns {
			if err := f(dir); err != nil {
				return err
			}
		}
		return nil
	}
}

func ptr(v int32) *int32      { return &v }
func ptr64(v int64) *int64    { return &v }
func ptrS(v string) *string   { return &v }
func js(v any) string         { b, _ := json.Marshal(v); return string(b) }
func jsonEqual(a, b any) bool { return js(a) == js(b) }
