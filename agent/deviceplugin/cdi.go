package deviceplugin

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// maxCDISpecSize bounds one CDI spec file; a spec for a full node of GPUs is tens of KiB.
const maxCDISpecSize = 4 << 20

// cdiDevice is one device of a CDI spec, with what sextant matches it by.
type cdiDevice struct {
	// qualified is vendor.com/class=name, as the runtime resolves it.
	qualified   string
	name        string
	annotations map[string]string
	// nodes are the host paths of its device nodes.
	nodes []string
}

// cdiSpec is the part of a CDI spec (any cdiVersion) sextant reads.
type cdiSpec struct {
	Kind    string `json:"kind"`
	Devices []struct {
		Name           string            `json:"name"`
		Annotations    map[string]string `json:"annotations"`
		ContainerEdits struct {
			DeviceNodes []struct {
				Path     string `json:"path"`
				HostPath string `json:"hostPath"`
			} `json:"deviceNodes"`
		} `json:"containerEdits"`
	} `json:"devices"`
}

// loadCDI reads the CDI specs (*.json, *.yaml, *.yml) in dirs. A missing directory
// has no specs; a spec that does not parse is skipped with a warning.
func loadCDI(dirs []string) ([]cdiDevice, []error) {
	var out []cdiDevice
	var warnings []error
	for _, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				warnings = append(warnings, fmt.Errorf("listing CDI specs in %s: %w", dir, err))
			}
			continue
		}
		for _, e := range ents {
			ext := filepath.Ext(e.Name())
			if e.IsDir() || (ext != ".json" && ext != ".yaml" && ext != ".yml") {
				continue
			}
			devs, err := readCDISpec(filepath.Join(dir, e.Name()))
			if err != nil {
				warnings = append(warnings, err)
				continue
			}
			out = append(out, devs...)
		}
	}
	return out, warnings
}

func readCDISpec(file string) ([]cdiDevice, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading CDI spec %s: %w", file, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCDISpecSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading CDI spec %s: %w", file, err)
	}
	if len(b) > maxCDISpecSize {
		return nil, fmt.Errorf("reading CDI spec %s: larger than %d bytes", file, maxCDISpecSize)
	}
	var spec cdiSpec
	if err := yaml.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("parsing CDI spec %s: %w", file, err)
	}
	if vendor, class, ok := strings.Cut(spec.Kind, "/"); !ok || vendor == "" || class == "" {
		return nil, fmt.Errorf("parsing CDI spec %s: kind %q is not vendor.com/class", file, spec.Kind)
	}
	var out []cdiDevice
	for _, d := range spec.Devices {
		if d.Name == "" {
			continue
		}
		cd := cdiDevice{qualified: spec.Kind + "=" + d.Name, name: d.Name, annotations: d.Annotations}
		for _, n := range d.ContainerEdits.DeviceNodes {
			p := n.HostPath
			if p == "" {
				p = n.Path
			}
			if p != "" {
				cd.nodes = append(cd.nodes, filepath.Clean(p))
			}
		}
		out = append(out, cd)
	}
	return out, nil
}

// matchCDI returns the qualified names of the CDI devices that stand for the PCI
// device addr: a CDI device named like the address or carrying it as an annotation
// value, or one whose device nodes include one of own (the device's own nodes, host
// paths) and none that is another device's own node (ownedByOthers), which leaves out
// the "all" devices vendors generate.
func matchCDI(devs []cdiDevice, addr string, own []string, ownedByOthers map[string]bool) []string {
	var out []string
	for _, d := range devs {
		match := d.name == addr
		for _, v := range d.annotations {
			match = match || v == addr
		}
		if !match && len(own) > 0 {
			mine, others := false, false
			for _, n := range d.nodes {
				mine = mine || slices.Contains(own, n)
				others = others || ownedByOthers[n]
			}
			match = mine && !others
		}
		if match && !slices.Contains(out, d.qualified) {
			out = append(out, d.qualified)
		}
	}
	slices.Sort(out)
	return out
}
