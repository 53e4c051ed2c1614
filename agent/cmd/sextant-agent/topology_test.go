package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sextant.io/sextant/api/v1alpha1"
)

const twoNUMA = "../../topology/testdata/two-numa"

func runTopologyCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestTopologyJSON(t *testing.T) {
	out, _, err := runTopologyCLI(t, "topology", "--sysfs-root", twoNUMA, "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(twoNUMA + ".json")
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("output differs from %s.json:\n%s", twoNUMA, out)
	}
	// The contract (docs/design-contract.md): these keys, lists never null, numaNode null where unknown.
	var raw map[string][]map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"numaNodes", "pciDevices", "nics"} {
		if raw[k] == nil {
			t.Errorf("%s is missing or null", k)
		}
	}
	for _, nic := range raw["nics"] {
		if _, ok := nic["pciAddress"]; !ok {
			t.Errorf("NIC %v has no pciAddress key (want null for virtual ones)", nic["name"])
		}
	}
}

func TestTopologyTable(t *testing.T) {
	out, _, err := runTopologyCLI(t, "topology", "--sysfs-root", twoNUMA)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"NUMA  CPUS  MEMORY    DISTANCES  NICS  DEVICES",
		"0     0-7   16.0 GiB  10 21      eth0  1 nic, 1 nvme, 1 other",
		"1     8-15  16.0 GiB  21 10      -     2 gpu, 1 accelerator",
		"0000:81:00.0  gpu          0x030200  10de:20b0      nvidia  1     0000:80:02.0  Healthy",
		"eth0   0000:02:00.0  0     10000 Mb/s",
		"veth0  -             -     10000 Mb/s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestTopologyPrevious(t *testing.T) {
	// A previous run saw a GPU that is gone now: it is still listed, Unhealthy.
	prev := v1alpha1.Topology{PCIDevices: []v1alpha1.PCIDevice{{
		Address: "0000:83:00.0", Class: "0x030200", Vendor: "0x10de", Device: "0x20b0",
		Driver: "nvidia", Kind: v1alpha1.KindGPU, Health: v1alpha1.Healthy,
	}}}
	b, _ := json.Marshal(prev)
	health := healthAfter(t, b)
	if health["0000:83:00.0"] != v1alpha1.Unhealthy || health["0000:81:00.0"] != v1alpha1.Healthy || len(health) != 7 {
		t.Errorf("health = %v, want 0000:83:00.0 Unhealthy and the 6 present devices Healthy", health)
	}
}

// A node without PCI devices writes a null list; read back, it is an empty one.
func TestTopologyPreviousWithoutDevices(t *testing.T) {
	health := healthAfter(t, []byte(`{"numaNodes": [], "pciDevices": null}`))
	for addr, h := range health {
		if h != v1alpha1.Healthy {
			t.Errorf("%s is %s, want Healthy: the previous run listed no devices", addr, h)
		}
	}
	if len(health) != 6 {
		t.Errorf("%d devices, want the 6 present", len(health))
	}
}

// healthAfter runs topology on the two-NUMA fixture with previous as --previous, and
// returns the health of each device it lists.
func healthAfter(t *testing.T, previous []byte) map[string]v1alpha1.DeviceHealth {
	t.Helper()
	file := filepath.Join(t.TempDir(), "prev.json")
	if err := os.WriteFile(file, previous, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runTopologyCLI(t, "topology", "--sysfs-root", twoNUMA, "--previous", file, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.Topology
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	health := map[string]v1alpha1.DeviceHealth{}
	for _, d := range got.PCIDevices {
		health[d.Address] = d.Health
	}
	return health
}

func TestTopologyErrors(t *testing.T) {
	noDevices := filepath.Join(t.TempDir(), "prev.json")
	if err := os.WriteFile(noDevices, []byte(`{"pciDevicez": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	badDevices := filepath.Join(t.TempDir(), "prev.json")
	if err := os.WriteFile(badDevices, []byte(`{"pciDevices": {"address": "0000:3b:00.0"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	noAddress := filepath.Join(t.TempDir(), "prev.json")
	if err := os.WriteFile(noAddress, []byte(`{"pciDevices": [{"address": "0000:3b:00.0"}, {"kind": "gpu"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	badAddress := filepath.Join(t.TempDir(), "prev.json")
	if err := os.WriteFile(badAddress, []byte(`{"pciDevices": [{"address": "banana"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	twice := filepath.Join(t.TempDir(), "prev.json")
	if err := os.WriteFile(twice, []byte(`{"pciDevices": [{"address": "0000:3b:00.0"}, {"address": "0000:3c:00.0"}, {"address": "0000:3b:00.0"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	notJSON := filepath.Join(t.TempDir(), "prev.json")
	if err := os.WriteFile(notJSON, []byte(`pciDevices: []`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"topology", "--sysfs-root", twoNUMA, "--output", "yaml"}, "--output must be table or json"},
		{[]string{"topology", "--sysfs-root", "/nonexistent"}, `--sysfs-root "/nonexistent"`},
		{[]string{"topology", "--sysfs-root", twoNUMA, "--previous", noDevices}, "no pciDevices list"},
		{[]string{"topology", "--sysfs-root", twoNUMA, "--previous", badDevices}, "pciDevices: json"},
		{[]string{"topology", "--sysfs-root", twoNUMA, "--previous", noAddress}, `pciDevices[1].address "": want a PCI address such as 0000:3b:00.0`},
		{[]string{"topology", "--sysfs-root", twoNUMA, "--previous", badAddress}, `pciDevices[0].address "banana"`},
		{[]string{"topology", "--sysfs-root", twoNUMA, "--previous", twice}, "pciDevices[0] and [2] both have address 0000:3b:00.0"},
		{[]string{"topology", "--sysfs-root", twoNUMA, "--previous", notJSON}, "not a JSON object"},
		{[]string{"topology", "--sysfs-root", twoNUMA, "--previous", notJSON}, "want the output of sextant-agent topology --output json"},
		{[]string{"topology", "--sysfs-root", "../../topology/testdata/malformed-cpulist"}, "node0/cpulist"},
		{[]string{"topology", "--sysfs-root", twoNUMA, "--previous", "/nonexistent/prev.json"}, "--previous"},
		{[]string{"topology", "extra"}, "unknown command"},
	}
	for _, tt := range tests {
		_, _, err := runTopologyCLI(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error = %v, want one containing %q", tt.args, err, tt.want)
		}
	}
}

func TestTopologyWarningsOnStderr(t *testing.T) {
	_, errOut, err := runTopologyCLI(t, "topology", "--sysfs-root", "../../topology/testdata/dangling-symlink")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "warning: PCI device 0000:00:04.0 left out") {
		t.Errorf("stderr = %q, want a warning about the dangling device link", errOut)
	}
}
