package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// cdiKind is the vendor/class of the CDI devices Prepare writes; one spec file per
// claim, named after its UID, so that a runtime's cached spec is never reused for
// another claim.
const (
	cdiKind        = DriverName + "/claim"
	cdiVersion     = "0.6.0"
	cdiFilePrefix  = "sextant.io-claim_"
	addressAnnoKey = DriverName + "/pci-address"
)

// cdiSpec is the subset of the CDI spec format Prepare writes.
type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name           string            `json:"name"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	ContainerEdits cdiEdits          `json:"containerEdits"`
}

type cdiEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
}

type cdiDeviceNode struct {
	Path        string `json:"path"`
	HostPath    string `json:"hostPath,omitempty"`
	Permissions string `json:"permissions,omitempty"`
}

// cdiName is the CDI device name of the claim's device named dev.
func cdiName(claim types.UID, dev string) string { return string(claim) + "-" + dev }

// qualified is the fully qualified CDI device ID of name.
func qualified(name string) string { return cdiKind + "=" + name }

func specPath(dir string, claim types.UID) string {
	return filepath.Join(dir, cdiFilePrefix+string(claim)+".json")
}

// writeSpec writes the claim's spec atomically and durably: a runtime never reads half
// of it, and a restarted agent reads back every claim it prepared (readPrepared).
func writeSpec(dir string, claim types.UID, spec cdiSpec) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encoding the CDI spec of claim %s: %w", claim, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making CDI spec directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".tmp-"+cdiFilePrefix)
	if err != nil {
		return fmt.Errorf("writing the CDI spec of claim %s: %w", claim, err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(b)
	err = errors.Join(werr, f.Chmod(0o644), f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), specPath(dir, claim))
	}
	if err != nil {
		return fmt.Errorf("writing the CDI spec of claim %s: %w", claim, err)
	}
	return nil
}

// removeSpec removes the claim's spec; one that is gone already is no error.
func removeSpec(dir string, claim types.UID) error {
	if err := os.Remove(specPath(dir, claim)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the CDI spec of claim %s: %w", claim, err)
	}
	return nil
}

// readPrepared reads back which PCI addresses each prepared claim holds from the specs
// in dir, so that a restarted agent still refuses to give a device to two claims. A spec
// that does not parse is reported and skipped.
func readPrepared(dir string) (map[types.UID][]string, []error) {
	out := map[types.UID][]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return out, nil
		}
		return out, []error{fmt.Errorf("listing CDI specs in %s: %w", dir, err)}
	}
	var warnings []error
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, cdiFilePrefix) || !strings.HasSuffix(name, ".json") {
			continue
		}
		uid := types.UID(strings.TrimSuffix(strings.TrimPrefix(name, cdiFilePrefix), ".json"))
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			warnings = append(warnings, fmt.Errorf("reading CDI spec %s: %w", name, err))
			continue
		}
		var spec cdiSpec
		if err := json.Unmarshal(b, &spec); err != nil {
			warnings = append(warnings, fmt.Errorf("parsing CDI spec %s: %w", name, err))
			continue
		}
		var addrs []string
		for _, d := range spec.Devices {
			if a := d.Annotations[addressAnnoKey]; a != "" {
				addrs = append(addrs, a)
			}
		}
		out[uid] = addrs
	}
	return out, warnings
}
