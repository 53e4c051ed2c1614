package annotations

import (
	"fmt"
	"strconv"
	"strings"
)

const (
	// NUMAPolicy is what users write to make one NUMA node a hard requirement.
	NUMAPolicy = "numa.sextant.io/policy"
	// NUMANodes is what the ranker writes: the NUMA node IDs chosen for the pod, such as
	// "1" or "0,1". The agent pins the pod's CPUs and memory to them.
	NUMANodes = "numa.sextant.io/nodes"
)

// MaxNUMANodes bounds the IDs a numa.sextant.io/nodes value may list, and the IDs
// themselves (0 to MaxNUMANodes-1); the NodeTopology CRD allows no more NUMA nodes.
const MaxNUMANodes = 1024

// NUMAPolicyValue is the value of numa.sextant.io/policy.
type NUMAPolicyValue string

const (
	// PolicyNone (annotation absent): fewer NUMA nodes are preferred, not required.
	PolicyNone NUMAPolicyValue = ""
	// PolicySingleNUMANode: the pod must fit one NUMA node.
	PolicySingleNUMANode NUMAPolicyValue = "single-numa-node"
)

// ParseNUMAPolicy parses a numa.sextant.io/policy value.
func ParseNUMAPolicy(value string) (NUMAPolicyValue, error) {
	switch NUMAPolicyValue(value) {
	case PolicySingleNUMANode:
		return PolicySingleNUMANode, nil
	default:
		return PolicyNone, fmt.Errorf("annotation %s: invalid value %q, the accepted form is %q (or no annotation)",
			NUMAPolicy, value, PolicySingleNUMANode)
	}
}

// PodNUMAPolicy returns the policy in a pod's annotations; PolicyNone when absent.
func PodNUMAPolicy(annotations map[string]string) (NUMAPolicyValue, error) {
	value, ok := annotations[NUMAPolicy]
	if !ok {
		return PolicyNone, nil
	}
	return ParseNUMAPolicy(value)
}

const numaNodesForm = `comma-separated NUMA node IDs below 1024 such as "0,1"`

// ParseNUMANodes parses a numa.sextant.io/nodes value such as "1" or "0,1" into sorted
// IDs without duplicates.
func ParseNUMANodes(value string) ([]int32, error) {
	return AppendNUMANodes(nil, value)
}

// AppendNUMANodes is ParseNUMANodes writing into buf[:0], for callers that parse the
// annotation of every pod on a node in a hot loop. It takes time linear in len(value)
// (plus MaxNUMANodes bits of bookkeeping) and returns at most MaxNUMANodes IDs.
func AppendNUMANodes(buf []int32, value string) ([]int32, error) {
	var seen [MaxNUMANodes / 64]uint64
	n := 0
	rest := value
	for {
		part, tail, more := strings.Cut(rest, ",")
		part = strings.TrimSpace(part)
		// At most four digits: strconv would accept "0000000001", but no ID needs them
		// and the bound keeps every part short.
		id, err := strconv.ParseUint(part, 10, 16)
		if err != nil || len(part) > 4 || id >= MaxNUMANodes {
			return nil, fmt.Errorf("annotation %s: invalid NUMA node ID %q in %q, the accepted form is %s", NUMANodes, truncate(part), truncate(value), numaNodesForm)
		}
		if seen[id/64]&(1<<(id%64)) == 0 {
			seen[id/64] |= 1 << (id % 64)
			n++
		}
		if !more {
			break
		}
		rest = tail
	}
	ids := buf[:0]
	if cap(ids) < n {
		ids = make([]int32, 0, n)
	}
	for w, bits := range seen {
		for b := 0; bits != 0; b++ {
			if bits&1 != 0 {
				ids = append(ids, int32(w*64+b))
			}
			bits >>= 1
		}
	}
	return ids, nil
}

// FormatNUMANodes formats NUMA node IDs the way numa.sextant.io/nodes holds them.
func FormatNUMANodes(ids []int32) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(id), 10))
	}
	return b.String()
}

// truncate keeps error messages (which end up in events and logs) short whatever the
// pod author wrote.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
