package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sextant.io/sextant/agent/topology"
)

// Version is the cgroup version of the hierarchy that holds the cpuset controller.
type Version int

const (
	V1 Version = 1
	V2 Version = 2
)

func (v Version) String() string { return fmt.Sprintf("v%d", int(v)) }

// Hierarchy is the cgroup hierarchy holding the cpuset controller.
type Hierarchy struct {
	// Dir is that hierarchy's root directory: <root>/cpuset on v1, <root> on v2.
	Dir     string
	Version Version
}

// DetectHierarchy finds the hierarchy with the cpuset controller under root (the
// directory where cgroups are mounted, /sys/fs/cgroup on a node). A hybrid host (v1
// controllers with an empty cgroup2 at <root>/unified, as the kubelet uses it) is v1.
func DetectHierarchy(root string) (Hierarchy, error) {
	if ctrls, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		if !containsWord(string(ctrls), "cpuset") {
			return Hierarchy{}, fmt.Errorf("cgroup v2 at %s has no cpuset controller (cgroup.controllers: %q)", root, strings.TrimSpace(string(ctrls)))
		}
		return Hierarchy{Dir: root, Version: V2}, nil
	}
	dir := filepath.Join(root, "cpuset")
	if _, err := os.Stat(filepath.Join(dir, "cpuset.cpus")); err == nil {
		return Hierarchy{Dir: dir, Version: V1}, nil
	}
	return Hierarchy{}, fmt.Errorf("no cpuset controller under %s: want cgroup v2 (%s/cgroup.controllers) or v1 (%s/cpuset.cpus)", root, root, dir)
}

func containsWord(s, word string) bool {
	for _, f := range strings.Fields(s) {
		if f == word {
			return true
		}
	}
	return false
}

// Cpuset is a set of CPUs and of NUMA nodes whose memory may be used, as a cpuset
// cgroup holds them.
type Cpuset struct {
	CPUs []int32
	Mems []int32
}

func (c Cpuset) String() string {
	return "cpus " + topology.FormatCPUList(c.CPUs) + " mems " + topology.FormatCPUList(c.Mems)
}

// Equal says whether both sets hold the same CPUs and the same memory nodes.
func (c Cpuset) Equal(o Cpuset) bool {
	return topology.FormatCPUList(c.CPUs) == topology.FormatCPUList(o.CPUs) &&
		topology.FormatCPUList(c.Mems) == topology.FormatCPUList(o.Mems)
}

// Within says whether every CPU and memory node of c is in o.
func (c Cpuset) Within(o Cpuset) bool { return subset(c.CPUs, o.CPUs) && subset(c.Mems, o.Mems) }

// Union is every CPU and memory node of c or o, in order.
func (c Cpuset) Union(o Cpuset) Cpuset {
	return Cpuset{CPUs: union(c.CPUs, o.CPUs), Mems: union(c.Mems, o.Mems)}
}

func union(a, b []int32) []int32 {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

func subset(a, b []int32) bool {
	in := make(map[int32]bool, len(b))
	for _, x := range b {
		in[x] = true
	}
	for _, x := range a {
		if !in[x] {
			return false
		}
	}
	return true
}

// The files of the cpuset controller. v1 and v2 name what a cgroup asks for alike, and
// what is in force differently.
const (
	fileCPUs = "cpuset.cpus"
	fileMems = "cpuset.mems"
)

func (h Hierarchy) effectiveFiles() (cpus, mems string) {
	if h.Version == V2 {
		return "cpuset.cpus.effective", "cpuset.mems.effective"
	}
	return "cpuset.effective_cpus", "cpuset.effective_mems"
}

// Effective reads the CPUs and memory nodes in force for the tasks of the cgroup dir:
// what the kernel enforces, whatever was asked for.
func (h Hierarchy) Effective(dir string) (Cpuset, error) {
	cf, mf := h.effectiveFiles()
	return readCpuset(dir, cf, mf)
}

// Requested reads what the cgroup dir asks for. On v2 an empty set means "as the
// parent", and on v1 a cgroup nothing was written to yet.
func (h Hierarchy) Requested(dir string) (Cpuset, error) {
	return readCpuset(dir, fileCPUs, fileMems)
}

func readCpuset(dir, cpusFile, memsFile string) (Cpuset, error) {
	var cs Cpuset
	var err error
	if cs.CPUs, err = readList(filepath.Join(dir, cpusFile)); err != nil {
		return Cpuset{}, err
	}
	if cs.Mems, err = readList(filepath.Join(dir, memsFile)); err != nil {
		return Cpuset{}, err
	}
	return cs, nil
}

func readList(path string) ([]int32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err // fs.ErrNotExist stays detectable: the cgroup went away
	}
	l, err := topology.ParseCPUList(string(b))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return l, nil
}

// ErrGone says a cgroup went away while it was being read or written: its pod ended.
var ErrGone = errors.New("cgroup is gone")

// ErrNoCpuset says a cgroup is there without its cpuset files: on v2 they exist only
// where the parent's cgroup.subtree_control enables cpuset (runc under systemd enables
// it after systemd made a pod's slice).
var ErrNoCpuset = errors.New("the cpuset controller is not enabled for it (see its parent's cgroup.subtree_control)")

// Missing tells why a cpuset file of the cgroup dir was not there: ErrNoCpuset while
// dir exists, else ErrGone.
func Missing(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return ErrNoCpuset
	}
	return ErrGone
}

func writeList(path string, l []int32) error {
	// Without O_CREATE: a cgroup file that is not there means the cgroup was removed,
	// and creating a regular file in its place would be wrong. O_TRUNC as runc opens
	// them (a no-op on cgroupfs, needed on a fixture tree).
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("write %s: %w", path, ErrGone)
		}
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.WriteString(topology.FormatCPUList(l))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		err = pe.Err // the path is in the message already
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", topology.FormatCPUList(l), path, err)
	}
	return nil
}
