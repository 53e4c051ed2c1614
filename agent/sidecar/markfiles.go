package sidecar

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
)

// markFiles keeps the stop marks in the agent's state directory (a host directory that
// outlives the agent's container): one file per container, under a directory per pod,
// <dir>/<pod UID>/<container ID>.
//
// The marks used to be containerd labels. containerd writes each update of its
// metadata store with a sync, and under a burst of finishing Jobs that wait was the
// second largest part of a stop (docs/design/0074). A file written without a sync
// outlives the agent's process, which is what the mark is for: a node that loses its
// page cache loses the containers with it.
type markFiles struct {
	dir string
}

// markName is what a pod UID or a container ID may look like to be a file name here:
// nothing that could climb out of the directory.
var markName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

func (m markFiles) path(podUID, id string) (string, error) {
	if !markName.MatchString(podUID) || !markName.MatchString(id) || podUID == ".." || id == ".." {
		return "", fmt.Errorf("stop mark of pod %q container %q: want letters, digits, '-', '_' and '.'", podUID, id)
	}
	return filepath.Join(m.dir, podUID, id), nil
}

// read returns the mark of container id of the pod, "" if there is none.
func (m markFiles) read(podUID, id string) (string, error) {
	p, err := m.path(podUID, id)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read stop mark: %w", err)
	}
	return string(b), nil
}

// write replaces the mark of container id. The new file is renamed over the old one, so
// an agent that dies halfway leaves the old mark or the new, never a torn one.
func (m markFiles) write(podUID, id, mark string) error {
	p, err := m.path(podUID, id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("write stop mark: %w", err)
	}
	tmp := p + ".new"
	if err := os.WriteFile(tmp, []byte(mark), 0o600); err != nil {
		return fmt.Errorf("write stop mark: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("write stop mark: %w", err)
	}
	return nil
}

// forgetPod removes the marks of a pod that is gone.
func (m markFiles) forgetPod(podUID string) error {
	if !markName.MatchString(podUID) || podUID == ".." {
		return nil
	}
	if err := os.RemoveAll(filepath.Join(m.dir, podUID)); err != nil {
		return fmt.Errorf("remove the stop marks of pod %s: %w", podUID, err)
	}
	return nil
}

// pods lists the pods that have marks.
func (m markFiles) pods() ([]string, error) {
	entries, err := os.ReadDir(m.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list stop marks: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
