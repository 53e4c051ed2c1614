package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"sextant.io/sextant/api/v1alpha1"
)

const (
	cpuDir  = "sys/devices/system/cpu"
	nodeDir = "sys/devices/system/node"
)

// numaInfo is what device locality is inferred from.
type numaInfo struct {
	nodes []v1alpha1.NUMANode // sorted by ID
	// cpuNode maps every CPU a node lists, online or not, to its node: a device's
	// local_cpulist names offline CPUs too.
	cpuNode map[int32]int32
}

func (n numaInfo) has(id int32) bool {
	return slices.ContainsFunc(n.nodes, func(x v1alpha1.NUMANode) bool { return x.ID == id })
}

// nodeOf maps a set of CPUs to the one NUMA node that holds them; nil when they span
// several nodes or none (as hwloc, which then attaches the device above the NUMA level).
func (n numaInfo) nodeOf(cpus []int32) *int32 {
	var found *int32
	for _, c := range cpus {
		id, ok := n.cpuNode[c]
		if !ok {
			continue
		}
		if found != nil && *found != id {
			return nil
		}
		found = &id
	}
	return found
}

// readOnlineCPUs returns the online CPUs, or nil when the tree says nothing about them
// (then every CPU a node lists counts as online).
func readOnlineCPUs(r root) (map[int32]bool, error) {
	s, err := r.readFile(cpuDir + "/online")
	switch {
	case err == nil:
		cpus, err := ParseCPUList(s)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", r.display(cpuDir+"/online"), err)
		}
		if len(cpus) == 0 {
			// A running kernel has at least the CPU reading this: the file is truncated.
			return nil, fmt.Errorf("parsing %s: no online CPUs", r.display(cpuDir+"/online"))
		}
		return toSet(cpus), nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	// Old kernels have no cpu/online; each cpuN/online then says, and CPUs that cannot
	// be offlined (usually cpu0) have no such file at all.
	names, err := r.readDir(cpuDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	online := map[int32]bool{}
	for _, name := range names {
		id, ok := indexedName(name, "cpu")
		if !ok {
			continue
		}
		f := cpuDir + "/" + name + "/online"
		s, err := r.readFile(f)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			online[id] = true
		case err != nil:
			return nil, err
		case s == "1":
			online[id] = true
		case s == "0":
		default:
			return nil, fmt.Errorf("parsing %s: want 0 or 1, got %q", r.display(f), s)
		}
	}
	if len(online) == 0 {
		return nil, nil
	}
	return online, nil
}

// readNUMA reads the NUMA nodes. Machines without NUMA information (kernels built
// without CONFIG_NUMA, some VMs) become one node 0 with every online CPU and the
// machine's MemTotal, which is what they are to a scheduler.
func readNUMA(r root, online map[int32]bool, warn func(error)) (numaInfo, error) {
	names, err := r.readDir(nodeDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return numaInfo{}, err
	}
	var ids []int32
	for _, name := range names {
		if id, ok := indexedName(name, "node"); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if len(ids) == 0 {
		return singleNode(r, online, 0, nil)
	}

	info := numaInfo{nodes: []v1alpha1.NUMANode{}, cpuNode: map[int32]int32{}}
	allCPUs := map[int32]bool{}
	var memSum int64
	var overlap error
	for _, id := range ids {
		dir := nodeDir + "/node" + strconv.Itoa(int(id))
		cpus, err := readNodeCPUs(r, dir)
		if err != nil {
			return numaInfo{}, err
		}
		for _, c := range cpus {
			if other, dup := info.cpuNode[c]; dup && overlap == nil {
				overlap = fmt.Errorf("CPU %d is listed by both NUMA node %d and node %d under %s; treating the machine as one NUMA node", c, other, id, r.display(nodeDir))
			}
			info.cpuNode[c] = id
			allCPUs[c] = true
		}
		mem, err := readNodeMemory(r, dir)
		if err != nil {
			return numaInfo{}, err
		}
		memSum += mem
		n := v1alpha1.NUMANode{ID: id, CPUs: onlineOnly(cpus, online), MemoryBytes: mem}
		if s, err := r.readFile(dir + "/distance"); err == nil {
			if n.Distances, err = parseDistances(s); err != nil {
				warn(fmt.Errorf("parsing %s: %w; NUMA distances left out", r.display(dir+"/distance"), err))
				n.Distances = nil
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			warn(err)
		}
		info.nodes = append(info.nodes, n)
	}
	if overlap != nil {
		// A buggy BIOS (hwloc's 8em64t-2s2ca2c-buggynuma) lists the same CPUs in every
		// node. Which node owns what is then unknowable: publish the machine as one
		// node, as hwloc also does, rather than guess.
		warn(overlap)
		if online == nil {
			online = allCPUs
		}
		return singleNode(r, online, ids[0], &memSum)
	}

	// Each distance list has one entry per online node, in ID order. If any node's list
	// does not line up with the nodes we read, no list can be trusted to mean what the
	// ranker thinks it means.
	for _, n := range info.nodes {
		if n.Distances != nil && len(n.Distances) != len(info.nodes) {
			warn(fmt.Errorf("%s has %d distances for %d NUMA nodes; NUMA distances left out",
				r.display(nodeDir+"/node"+strconv.Itoa(int(n.ID))+"/distance"), len(n.Distances), len(info.nodes)))
			for i := range info.nodes {
				info.nodes[i].Distances = nil
			}
			break
		}
	}

	if online != nil {
		var lost []int32
		for c := range online {
			if _, ok := info.cpuNode[c]; !ok {
				lost = append(lost, c)
			}
		}
		if len(lost) > 0 {
			warn(fmt.Errorf("online CPUs %s belong to no NUMA node under %s and are left out", FormatCPUList(lost), r.display(nodeDir)))
		}
	}
	return info, nil
}

// singleNode is the one-node view of a machine. memFallback, when not nil, is used if
// proc/meminfo is missing.
func singleNode(r root, online map[int32]bool, id int32, memFallback *int64) (numaInfo, error) {
	const meminfo = "proc/meminfo"
	var mem int64
	s, err := r.readFile(meminfo)
	switch {
	case err == nil:
		if mem, err = ParseMeminfo(s); err != nil {
			return numaInfo{}, fmt.Errorf("parsing %s: %w", r.display(meminfo), err)
		}
	case errors.Is(err, fs.ErrNotExist) && memFallback != nil && *memFallback > 0:
		mem = *memFallback
	case errors.Is(err, fs.ErrNotExist):
		return numaInfo{}, fmt.Errorf("no NUMA nodes under %s and no %s: cannot tell the machine's memory", r.display(nodeDir), r.display(meminfo))
	default:
		return numaInfo{}, err
	}
	cpus := []int32{}
	for c := range online {
		cpus = append(cpus, c)
	}
	slices.Sort(cpus)
	info := numaInfo{
		nodes:   []v1alpha1.NUMANode{{ID: id, CPUs: cpus, MemoryBytes: mem}},
		cpuNode: map[int32]int32{},
	}
	for _, c := range cpus {
		info.cpuNode[c] = id
	}
	return info, nil
}

// readNodeCPUs reads a node's CPUs from cpulist, or from the cpumap mask or cpuN links
// that older kernels have instead. A node with none of them has no CPUs (a memory tier).
func readNodeCPUs(r root, dir string) ([]int32, error) {
	if s, err := r.readFile(dir + "/cpulist"); err == nil {
		cpus, err := ParseCPUList(s)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", r.display(dir+"/cpulist"), err)
		}
		return cpus, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if s, err := r.readFile(dir + "/cpumap"); err == nil {
		cpus, err := ParseCPUMask(s)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", r.display(dir+"/cpumap"), err)
		}
		return cpus, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	names, err := r.readDir(dir)
	if err != nil {
		return nil, err
	}
	cpus := []int32{}
	for _, name := range names {
		if id, ok := indexedName(name, "cpu"); ok {
			cpus = append(cpus, id)
		}
	}
	slices.Sort(cpus)
	return cpus, nil
}

// readNodeMemory reads a node's MemTotal. Unlike most sysfs files a missing meminfo is
// an error: publishing 0 bytes would be a wrong topology, not a missing detail.
func readNodeMemory(r root, dir string) (int64, error) {
	f := dir + "/meminfo"
	s, err := r.readFile(f)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("reading %s: %w", r.display(f), err)
	}
	if err != nil {
		return 0, err
	}
	mem, err := ParseMeminfo(s)
	if err != nil {
		return 0, fmt.Errorf("parsing %s: %w", r.display(f), err)
	}
	return mem, nil
}

func onlineOnly(cpus []int32, online map[int32]bool) []int32 {
	if online == nil {
		return cpus
	}
	out := []int32{}
	for _, c := range cpus {
		if online[c] {
			out = append(out, c)
		}
	}
	return out
}

func toSet(cpus []int32) map[int32]bool {
	s := make(map[int32]bool, len(cpus))
	for _, c := range cpus {
		s[c] = true
	}
	return s
}

// indexedName parses names like "node3" or "cpu12".
func indexedName(name, prefix string) (int32, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || rest == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 31)
	if err != nil || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	return int32(n), true
}
