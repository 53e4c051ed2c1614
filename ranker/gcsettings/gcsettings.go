// Package gcsettings sets the Go garbage collector of sextant-ranker: a higher GC
// percent than Go's default of 100, bounded by a soft memory limit taken from the
// container's cgroup.
//
// Why: at 5000 nodes the ranker keeps every node's NodeTopology and NodeBandwidth
// decoded in memory and allocates per node and pod in Filter and Score. With GOGC=100 the
// collector ran about twice as often as in vanilla kube-scheduler, and its marking
// evicted the scheduler's node data from the CPU caches, slowing kube-scheduler's own
// filters as well. In CPU profiles of make bench-ranker, GOGC=400 cut marking from 0.72
// to 0.14 ms per pod and brought those filters back to their speed without the plugins
// (docs/design/0003-gc-percent-and-soft-memory-limit.md). A larger GC percent trades
// memory for that; the soft limit (a fraction of the container's memory limit) makes
// the collector work harder only as the heap nears what the container may use, instead
// of the container being killed.
//
// GOGC and GOMEMLIMIT in the environment, Go's own knobs, win over the flags.
package gcsettings

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Defaults.
const (
	DefaultGCPercent        = 400
	DefaultMemoryLimitRatio = 0.9
	DefaultCgroupRoot       = "/sys/fs/cgroup"
	DefaultProcSelfCgroup   = "/proc/self/cgroup"
)

// Options are the GC settings the flags choose.
type Options struct {
	// GCPercent is the GC percent (GOGC) to set; 0 leaves Go's default.
	GCPercent int
	// MemoryLimitRatio is the fraction of the cgroup memory limit to set as the soft
	// memory limit (GOMEMLIMIT); 0 sets none.
	MemoryLimitRatio float64
	// CgroupRoot is where the cgroup file systems are mounted.
	CgroupRoot string
	// ProcSelfCgroup is the process's cgroup membership file.
	ProcSelfCgroup string
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		GCPercent:        DefaultGCPercent,
		MemoryLimitRatio: DefaultMemoryLimitRatio,
		CgroupRoot:       DefaultCgroupRoot,
		ProcSelfCgroup:   DefaultProcSelfCgroup,
	}
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(flags *pflag.FlagSet) {
	flags.IntVar(&o.GCPercent, "gc-percent", o.GCPercent,
		"Go GC percent (as GOGC): the heap may grow by this percentage of the live heap before a collection; 0 keeps Go's default of 100. The GOGC environment variable, when set, wins")
	flags.Float64Var(&o.MemoryLimitRatio, "memory-limit-ratio", o.MemoryLimitRatio,
		"fraction (0-1] of the container's cgroup memory limit to set as Go's soft memory limit (as GOMEMLIMIT), so the collector works harder near the limit rather than the container being killed; 0 sets none, nor does a cgroup without a limit. The GOMEMLIMIT environment variable, when set, wins")
	flags.StringVar(&o.CgroupRoot, "cgroup-root", o.CgroupRoot,
		"where the cgroup file systems are mounted, for --memory-limit-ratio")
}

// Validate returns an error naming the first bad option and its accepted form.
func (o *Options) Validate() error {
	if o.GCPercent < 0 {
		return fmt.Errorf("--gc-percent %d: want 0 (Go's default) or a positive percentage", o.GCPercent)
	}
	if math.IsNaN(o.MemoryLimitRatio) || o.MemoryLimitRatio < 0 || o.MemoryLimitRatio > 1 {
		return fmt.Errorf("--memory-limit-ratio %v: want a fraction from 0 (none) to 1", o.MemoryLimitRatio)
	}
	return nil
}

// Applied is what Apply set, for the log.
type Applied struct {
	// GCPercent is the GC percent in effect and GCPercentFrom where it came from:
	// "GOGC", "--gc-percent" or "go default".
	GCPercent     int
	GCPercentFrom string
	// MemoryLimitBytes is the soft memory limit Apply set, 0 if it set none, and
	// MemoryLimitFrom why: "GOMEMLIMIT", "cgroup", "no cgroup limit" or
	// "--memory-limit-ratio 0".
	MemoryLimitBytes int64
	MemoryLimitFrom  string
	// CgroupLimitBytes is the cgroup memory limit found, 0 if none.
	CgroupLimitBytes int64
	// CgroupErr is why the cgroup limit could not be read; the ranker runs on without
	// a soft limit then, as Go would.
	CgroupErr error
}

// Apply sets the runtime's GC percent and soft memory limit from the options, leaving
// each alone when its environment variable (looked up with getenv) is set. It fails only
// on invalid options.
func (o *Options) Apply(getenv func(string) string) (Applied, error) {
	if err := o.Validate(); err != nil {
		return Applied{}, err
	}
	var a Applied
	switch {
	case getenv("GOGC") != "":
		a.GCPercentFrom = "GOGC"
		// SetGCPercent reports the previous value; setting it back changes nothing.
		a.GCPercent = debug.SetGCPercent(-1)
		debug.SetGCPercent(a.GCPercent)
	case o.GCPercent > 0:
		a.GCPercent, a.GCPercentFrom = o.GCPercent, "--gc-percent"
		debug.SetGCPercent(o.GCPercent)
	default:
		a.GCPercent, a.GCPercentFrom = 100, "go default"
	}

	switch {
	case getenv("GOMEMLIMIT") != "":
		a.MemoryLimitFrom = "GOMEMLIMIT"
		a.MemoryLimitBytes = debug.SetMemoryLimit(-1) // -1 reads without changing
	case o.MemoryLimitRatio == 0:
		a.MemoryLimitFrom = "--memory-limit-ratio 0"
	default:
		limit, err := CgroupMemoryLimit(o.ProcSelfCgroup, o.CgroupRoot)
		a.CgroupLimitBytes, a.CgroupErr = limit, err
		if err != nil {
			a.MemoryLimitFrom = "cgroup unreadable"
			break
		}
		if limit == 0 {
			a.MemoryLimitFrom = "no cgroup limit"
			break
		}
		a.MemoryLimitBytes = SoftLimit(limit, o.MemoryLimitRatio)
		a.MemoryLimitFrom = "cgroup"
		debug.SetMemoryLimit(a.MemoryLimitBytes)
	}
	return a, nil
}

// SoftLimit is the soft memory limit Apply sets for a container memory limit and a
// --memory-limit-ratio.
func SoftLimit(containerLimit int64, ratio float64) int64 {
	return int64(float64(containerLimit) * ratio)
}

// CgroupMemoryLimit returns the memory limit of the cgroup procSelfCgroup names (as
// /proc/self/cgroup), under the cgroup file systems at root: the smallest limit of that
// cgroup and its ancestors, in bytes, or 0 when none has one, over v1's memory controller
// and v2 alike. Missing files mean no limit, not an error: outside a
// container there is often none to read.
func CgroupMemoryLimit(procSelfCgroup, root string) (int64, error) {
	raw, err := os.ReadFile(procSelfCgroup)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read cgroup membership: %w", err)
	}
	// A membership line's path is never empty ("/" at least), so empty means absent.
	var v2, v1 string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1 = parts[2]
			}
		}
	}
	var limit int64
	if v1 != "" {
		l, err := smallestLimit(filepath.Join(root, "memory"), v1, "memory.limit_in_bytes")
		if err != nil {
			return 0, err
		}
		limit = tighter(limit, l)
	}
	if v2 != "" {
		l, err := smallestLimit(root, v2, "memory.max")
		if err != nil {
			return 0, err
		}
		limit = tighter(limit, l)
	}
	return limit, nil
}

// tighter returns the smaller of two limits, where 0 means none.
func tighter(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// smallestLimit reads file in the cgroup at path under mount and in each of its
// ancestors, returning the smallest limit found (0: none). Inside a container's cgroup
// namespace path may name a cgroup the mount does not show: those directories are
// missing and the mount's root, the container's own cgroup, still is read.
func smallestLimit(mount, path, file string) (int64, error) {
	var limit int64
	dir := filepath.Clean("/" + path)
	for {
		l, err := readLimit(filepath.Join(mount, dir, file))
		if err != nil {
			return 0, err
		}
		limit = tighter(limit, l)
		if dir == "/" {
			return limit, nil
		}
		dir = filepath.Dir(dir)
	}
}

// unlimitedV1 is where cgroup v1 reports "no limit": the largest page-aligned int64, or
// near it on every architecture.
const unlimitedV1 = int64(1) << 62

// readLimit reads a memory.max or memory.limit_in_bytes file: bytes, or 0 for "max", an
// unlimited v1 value, or a missing file.
func readLimit(path string) (int64, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read cgroup memory limit: %w", err)
	}
	s := strings.TrimSpace(string(raw))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse cgroup memory limit %s: %q is neither bytes nor \"max\"", path, s)
	}
	if n <= 0 || n >= unlimitedV1 {
		return 0, nil
	}
	return n, nil
}
