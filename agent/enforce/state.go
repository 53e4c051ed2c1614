package enforce

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

// StateFile is the name of the agent's enforcement state under its state directory.
const StateFile = "enforcement.json"

// State is what the agent must know again after a restart, and what the kernel does not
// tell: what each shaped interface held before, and which class minor each pod has.
// It is written before the kernel is changed, so a crash in between leaves a record of
// what to undo rather than a change nobody knows how to undo.
type State struct {
	// BootID is the kernel's boot_id when the state was written: after a reboot the
	// kernel holds none of what the state says the agent made.
	BootID     string                     `json:"bootID,omitempty"`
	Interfaces map[string]*InterfaceState `json:"interfaces,omitempty"`
	Minors     map[types.UID]uint16       `json:"minors,omitempty"`

	path string
	// dirty: a minor was handed out or released since the last Save.
	dirty bool
}

// InterfaceState is one shaped interface.
type InterfaceState struct {
	// Ifindex tells a re-created interface (a new ifindex, the kernel's default root)
	// from the one the agent shaped.
	Ifindex  int      `json:"ifindex"`
	Previous Previous `json:"previous"`
	// AddedClsact: the agent added the interface's clsact qdisc for the ingress redirect,
	// and removes it when it is left empty.
	AddedClsact bool `json:"addedClsact,omitempty"`
}

// LoadState reads the state file in dir; a missing file is an empty state.
func LoadState(dir string) (*State, error) {
	s := &State{path: filepath.Join(dir, StateFile)}
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read the enforcement state: %w", err)
	default:
		if err := json.Unmarshal(b, s); err != nil {
			return nil, fmt.Errorf("read the enforcement state %s: %w (move it aside to start over; the interfaces it names keep the agent's qdiscs until removed by hand)", s.path, err)
		}
	}
	if boot := bootID(); s.BootID != "" && s.BootID != boot {
		// Rebooted: every interface is as the boot made it, and what was recorded of the
		// roots before is not to be put back over that.
		s.Interfaces = nil
		s.dirty = true
	}
	if s.Interfaces == nil {
		s.Interfaces = map[string]*InterfaceState{}
	}
	if s.Minors == nil {
		s.Minors = map[types.UID]uint16{}
	}
	return s, nil
}

// bootIDFile is the kernel's boot_id, the same in every container of the node.
var bootIDFile = "/proc/sys/kernel/random/boot_id"

func bootID() string {
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Save writes the state durably: a new file renamed over the old one.
func (s *State) Save() error {
	s.BootID = bootID()
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("make the state directory: %w", err)
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write the enforcement state: %w", err)
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("write the enforcement state: %w", err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("write the enforcement state: %w", err)
	}
	s.dirty = false
	if d, err := os.Open(filepath.Dir(s.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Minor returns the pod's class minor, handing out the lowest free one to a pod that
// has none. The caller saves the state.
func (s *State) Minor(uid types.UID) uint16 {
	if m, ok := s.Minors[uid]; ok {
		return m
	}
	used := make(map[uint16]bool, len(s.Minors))
	for _, m := range s.Minors {
		used[m] = true
	}
	m := FirstPodMinor
	for used[m] {
		m++
	}
	s.Minors[uid] = m
	s.dirty = true
	return m
}

// SaveIfChanged saves the state if a minor was handed out or released since the last
// Save.
func (s *State) SaveIfChanged() error {
	if !s.dirty {
		return nil
	}
	return s.Save()
}

// ReleaseMinors forgets the minors of pods not in keep.
func (s *State) ReleaseMinors(keep map[types.UID]uint16) {
	for uid := range s.Minors {
		if _, ok := keep[uid]; !ok {
			delete(s.Minors, uid)
			s.dirty = true
		}
	}
}
