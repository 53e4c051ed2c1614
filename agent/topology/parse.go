package topology

import (
	"bufio"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// maxCPUs bounds CPU IDs: the kernel's own NR_CPUS limit is 8192 on the largest
// distribution configs, so anything beyond is garbage, and the bound keeps a hostile
// "0-4294967295" from allocating gigabytes.
const maxCPUs = 1 << 16

// trimSysfs strips what surrounds a sysfs value: the trailing newline, padding, and the
// NUL bytes some sysfs dumps (and hwloc's test trees) carry after it.
func trimSysfs(s string) string {
	return strings.Trim(s, " \t\r\n\x00")
}

// ParseCPUList parses the kernel's CPU list format ("0-3,8-11", "" for none) into sorted,
// deduplicated CPU IDs. Ranges may carry a stride ("0-7:2") as cpulist_parse accepts.
func ParseCPUList(s string) ([]int32, error) {
	s = trimSysfs(s)
	cpus := []int32{}
	if s == "" {
		return cpus, nil
	}
	seen := map[int32]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("empty element in CPU list %q", s)
		}
		rng, strideStr, hasStride := strings.Cut(part, ":")
		loStr, hiStr, isRange := strings.Cut(rng, "-")
		lo, err := parseCPUID(loStr)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %w", s, err)
		}
		hi := lo
		if isRange {
			if hi, err = parseCPUID(hiStr); err != nil {
				return nil, fmt.Errorf("CPU list %q: %w", s, err)
			}
			if hi < lo {
				return nil, fmt.Errorf("CPU list %q: range %q runs backwards", s, part)
			}
		}
		stride := int32(1)
		if hasStride {
			if !isRange {
				return nil, fmt.Errorf("CPU list %q: stride without a range in %q", s, part)
			}
			n, err := strconv.ParseInt(strideStr, 10, 32)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("CPU list %q: bad stride in %q", s, part)
			}
			stride = int32(n)
		}
		for c := lo; c <= hi; c += stride {
			if !seen[c] {
				seen[c] = true
				cpus = append(cpus, c)
			}
			if c > hi-stride {
				break // c+stride would overflow past hi
			}
		}
	}
	slices.Sort(cpus)
	return cpus, nil
}

func parseCPUID(s string) (int32, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("bad CPU number %q", s)
	}
	if n >= maxCPUs {
		return 0, fmt.Errorf("CPU number %d is beyond %d", n, maxCPUs-1)
	}
	return int32(n), nil
}

// ParseCPUMask parses the kernel's hexadecimal CPU mask format (cpumap, local_cpus:
// comma-separated 32-bit words, most significant first, e.g. "00000000,000000ff") into
// sorted CPU IDs.
func ParseCPUMask(s string) ([]int32, error) {
	s = trimSysfs(s)
	cpus := []int32{}
	if s == "" {
		return cpus, nil
	}
	words := strings.Split(s, ",")
	if len(words)*32 > maxCPUs {
		return nil, fmt.Errorf("CPU mask %q has more than %d bits", s, maxCPUs)
	}
	for i, w := range words {
		w = strings.TrimPrefix(strings.TrimSpace(w), "0x")
		if w == "" || len(w) > 8 {
			return nil, fmt.Errorf("CPU mask %q: bad word %q", s, w)
		}
		v, err := strconv.ParseUint(w, 16, 32)
		if err != nil {
			return nil, fmt.Errorf("CPU mask %q: bad word %q", s, w)
		}
		base := int32(len(words)-1-i) * 32
		for v != 0 {
			b := bits.TrailingZeros64(v)
			cpus = append(cpus, base+int32(b))
			v &^= 1 << b
		}
	}
	slices.Sort(cpus)
	return cpus, nil
}

// FormatCPUList is the inverse of ParseCPUList: sorted IDs compressed into ranges,
// "0-3,8-11". Input order and duplicates do not matter.
func FormatCPUList(cpus []int32) string {
	c := slices.Clone(cpus)
	slices.Sort(c)
	c = slices.Compact(c)
	var b strings.Builder
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(c[i])))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(int(c[j])))
		}
		i = j + 1
	}
	return b.String()
}

// errNoMemTotal reports a meminfo without a MemTotal line, which is how a truncated file
// usually shows.
var errNoMemTotal = errors.New("no MemTotal line")

// ParseMeminfo returns MemTotal in bytes from either /proc/meminfo ("MemTotal: 16 kB")
// or a NUMA node's meminfo ("Node 0 MemTotal: 16 kB"). Lines other than MemTotal are not
// checked: the kernel adds fields over time.
func ParseMeminfo(s string) (int64, error) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		fields := strings.Fields(strings.Trim(sc.Text(), "\x00"))
		// Node meminfo prefixes "Node N".
		if len(fields) >= 2 && fields[0] == "Node" {
			fields = fields[2:]
		}
		if len(fields) == 0 || fields[0] != "MemTotal:" {
			continue
		}
		if len(fields) != 3 || fields[2] != "kB" {
			return 0, fmt.Errorf("malformed MemTotal line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil || kb < 0 || kb > (1<<63-1)/1024 {
			return 0, fmt.Errorf("malformed MemTotal value %q", fields[1])
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errNoMemTotal
}

// parseDistances parses a node's distance file: one SLIT distance per online node.
func parseDistances(s string) ([]int32, error) {
	fields := strings.Fields(trimSysfs(s))
	if len(fields) == 0 {
		return nil, errors.New("no distances")
	}
	d := make([]int32, 0, len(fields))
	for _, f := range fields {
		n, err := strconv.ParseUint(f, 10, 8)
		if err != nil {
			return nil, fmt.Errorf("bad distance %q", f)
		}
		d = append(d, int32(n))
	}
	return d, nil
}
