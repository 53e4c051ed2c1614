package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Kubepods is the kubelet's tree of pod cgroups in a hierarchy: the kubepods cgroup, its
// QoS-class children, and a cgroup per pod below them.
type Kubepods struct {
	Hierarchy
	// Dir is the kubepods cgroup: <hierarchy>/kubepods with the cgroupfs driver,
	// <hierarchy>/kubepods.slice with the systemd driver.
	Dir string
	// Systemd says the kubelet names its cgroups the systemd driver's way.
	Systemd bool
}

// FindKubepods finds the kubepods cgroup of h. name is its path relative to the
// hierarchy's root when the kubelet runs with --cgroup-root, empty to look for
// "kubepods.slice" and "kubepods" there. It fails until the kubelet made the cgroup.
func FindKubepods(h Hierarchy, name string) (*Kubepods, error) {
	candidates := []string{"kubepods.slice", "kubepods"}
	if name != "" {
		candidates = []string{strings.Trim(name, "/")}
	}
	for _, c := range candidates {
		dir := filepath.Join(h.Dir, filepath.FromSlash(c))
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return &Kubepods{Hierarchy: h, Dir: dir, Systemd: strings.HasSuffix(dir, ".slice")}, nil
		}
	}
	return nil, fmt.Errorf("no kubepods cgroup under %s (looked for %s): is the kubelet running, and with this --cgroup-root?",
		h.Dir, strings.Join(candidates, ", "))
}

// slicePrefix is the kubepods cgroup's systemd name without ".slice". The systemd driver
// joins all parts of a cgroup's name with '-' (CgroupName.ToSystemd), so every cgroup
// below begins with it: "kubepods-", or "kubelet-kubepods-" with --cgroup-root=/kubelet.
func (k *Kubepods) slicePrefix() string {
	return strings.TrimSuffix(filepath.Base(k.Dir), ".slice")
}

// QoSDirs are the directories pod cgroups are created in: kubepods itself for
// Guaranteed pods, and the Burstable and BestEffort cgroups.
func (k *Kubepods) QoSDirs() []string {
	if k.Systemd {
		p := k.slicePrefix()
		return []string{k.Dir,
			filepath.Join(k.Dir, p+"-burstable.slice"),
			filepath.Join(k.Dir, p+"-besteffort.slice")}
	}
	return []string{k.Dir, filepath.Join(k.Dir, "burstable"), filepath.Join(k.Dir, "besteffort")}
}

// podDirNames are the names a pod's cgroup may have, one per QoS directory, in the
// order of QoSDirs.
func (k *Kubepods) podDirNames(uid string) []string {
	if k.Systemd {
		// systemd slice names cannot hold "-" inside a unit name's part.
		u := strings.ReplaceAll(uid, "-", "_")
		p := k.slicePrefix()
		return []string{p + "-pod" + u + ".slice",
			p + "-burstable-pod" + u + ".slice",
			p + "-besteffort-pod" + u + ".slice"}
	}
	return []string{"pod" + uid, "pod" + uid, "pod" + uid}
}

// PodDir returns the pod's cgroup directory, and false while the kubelet has not made it.
func (k *Kubepods) PodDir(uid string) (string, bool) {
	names := k.podDirNames(uid)
	for i, parent := range k.QoSDirs() {
		dir := filepath.Join(parent, names[i])
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir, true
		}
	}
	return "", false
}

// PodUID returns the UID of the pod whose cgroup directory is named name, and false for
// any other directory (QoS classes, containers, system slices).
func PodUID(name string) (string, bool) {
	var uid string
	switch {
	case strings.HasPrefix(name, "pod"):
		uid = strings.TrimPrefix(name, "pod")
	case strings.HasSuffix(name, ".slice"):
		// <kubepods>-[<qos>-]pod<uid_>.slice, where <kubepods> depends on --cgroup-root
		// ("kubepods", "kubelet-kubepods"): the pod is the last '-'-separated part.
		i := strings.LastIndex(name, "-")
		if i <= 0 {
			return "", false
		}
		last := strings.TrimSuffix(name[i+1:], ".slice")
		if !strings.HasPrefix(last, "pod") {
			return "", false
		}
		uid = strings.ReplaceAll(strings.TrimPrefix(last, "pod"), "_", "-")
	default:
		return "", false
	}
	if !isUID(uid) {
		return "", false
	}
	return uid, true
}

// isUID accepts the 8-4-4-4-12 hex form the API server gives pods.
func isUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F') {
				return false
			}
		}
	}
	return true
}

// Children lists the child cgroups of dir: for a pod, its sandbox's and its containers'.
func Children(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list %s: %w", dir, ErrGone)
		}
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// Narrowed is what Narrow did.
type Narrowed struct {
	// Children counts the child cgroups the pod had when Narrow began. None means no
	// container of the pod can have run outside the set: every one that comes inherits it.
	Children int
	// Wrote says whether any file was written; false when everything already held the set.
	Wrote bool
}

// Narrow restricts the pod cgroup podDir to cs, so that every container the pod has and
// will have runs on cs.CPUs and takes memory from cs.Mems only.
//
// On v1 a cgroup's set must contain its children's (the kernel refuses otherwise with
// EBUSY), so the children are narrowed first, then the pod; a child created between the
// two makes the pod's write fail, and Narrow starts over. A child may not ask for more
// than its parent has either, so a pod cgroup that holds another set (someone else
// narrowed it) is first widened to both sets, which widens no child. memory_migrate is
// switched on before mems narrow, so pages a running container already has move to the
// new nodes.
// On v2 a child's effective set is always within its parent's, so narrowing the pod is
// enough, and the kernel migrates memory itself.
func (h Hierarchy) Narrow(podDir string, cs Cpuset) (Narrowed, error) {
	var res Narrowed
	const attempts = 5
	for attempt := 1; ; attempt++ {
		children, err := Children(podDir)
		if err != nil {
			return res, err
		}
		if attempt == 1 {
			res.Children = len(children)
		}
		if h.Version == V1 {
			var before *Cpuset // what the pod asked for before it was widened
			if cur, err := h.Requested(podDir); err == nil && len(children) > 0 && !cs.Within(cur) {
				wrote, err := h.narrowOne(podDir, cur.Union(cs))
				res.Wrote = res.Wrote || wrote
				if err != nil {
					return res, err
				}
				before = &cur
			}
			for _, c := range children {
				wrote, err := h.narrowOne(c, cs)
				res.Wrote = res.Wrote || wrote
				if err != nil && !errors.Is(err, ErrGone) { // a container that ended is no matter
					if before != nil {
						// Best effort: containers made before the next try would start
						// on the union.
						_, _ = h.narrowOne(podDir, *before)
					}
					return res, err
				}
			}
		}
		wrote, err := h.narrowOne(podDir, cs)
		res.Wrote = res.Wrote || wrote
		if err == nil {
			return res, nil
		}
		if !errors.Is(err, syscall.EBUSY) || attempt == attempts {
			return res, err
		}
	}
}

// narrowOne writes cs to one cgroup unless it already asks for exactly cs.
func (h Hierarchy) narrowOne(dir string, cs Cpuset) (bool, error) {
	cur, err := h.Requested(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		return false, fmt.Errorf("narrow %s: %w", dir, Missing(dir))
	}
	if cur.Equal(cs) {
		return false, nil
	}
	if h.Version == V1 {
		// Best effort: a kernel without the file still narrows, it only leaves pages
		// where they are.
		_ = os.WriteFile(filepath.Join(dir, "cpuset.memory_migrate"), []byte("1"), 0)
	}
	// CPUs before memory nodes: on v1 a cgroup with tasks must never have an empty
	// set, and neither write can make one here.
	if err := writeList(filepath.Join(dir, fileCPUs), cs.CPUs); err != nil {
		return true, err
	}
	if err := writeList(filepath.Join(dir, fileMems), cs.Mems); err != nil {
		return true, err
	}
	return true, nil
}
