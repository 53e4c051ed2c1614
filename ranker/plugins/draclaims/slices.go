package draclaims

import (
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// SliceIndex groups the cluster's ResourceSlices by pool and by node, and keeps the
// grouping for every pod scheduled while the listed slices stay the same ones. Without
// it each pod with claims regroups every slice of the cluster twice (once for locating
// devices, once inside the allocator), which on thousands of nodes costs more than the
// allocation it serves. The zero value is ready; a nil *SliceIndex groups anew for each
// pod.
type SliceIndex struct {
	mu   sync.Mutex
	last *sliceSet
}

// sliceSet is one listing of the slices, grouped.
type sliceSet struct {
	// members are the listed slices. The listing is "the same" as an earlier one when
	// it holds exactly these pointers: listers hand out their cache's objects, which are
	// replaced, never changed in place, on an update, and members keeps every one of
	// them alive, so no new slice can be allocated at an address in it.
	members map[*resourceapi.ResourceSlice]struct{}
	pools   map[poolID][]*resourceapi.ResourceSlice
	// onNode are, per node name, the slices of the pools whose every slice names one
	// node, for the pools with a slice naming this one. shared are the slices of the
	// other pools (a slice for all nodes, a node selector, per-device node selection, or
	// shared counters): any node may see them.
	onNode map[string][]*resourceapi.ResourceSlice
	shared []*resourceapi.ResourceSlice
}

// of is the grouping of all, the slices as listed now: the last one if all lists the
// same slices.
func (x *SliceIndex) of(all []*resourceapi.ResourceSlice) *sliceSet {
	if x == nil {
		return group(all)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.last == nil || !x.last.holdsExactly(all) {
		x.last = group(all)
	}
	return x.last
}

// holdsExactly reports whether all lists the same slices as s. A listing has no
// duplicates, so the same length and every slice a member means the same set.
func (s *sliceSet) holdsExactly(all []*resourceapi.ResourceSlice) bool {
	if len(all) != len(s.members) {
		return false
	}
	for _, sl := range all {
		if _, ok := s.members[sl]; !ok {
			return false
		}
	}
	return true
}

func group(all []*resourceapi.ResourceSlice) *sliceSet {
	s := &sliceSet{
		members: make(map[*resourceapi.ResourceSlice]struct{}, len(all)),
		pools:   make(map[poolID][]*resourceapi.ResourceSlice, len(all)),
		onNode:  map[string][]*resourceapi.ResourceSlice{},
	}
	unbound := map[poolID]bool{}
	for _, sl := range all {
		s.members[sl] = struct{}{}
		id := poolID{sl.Spec.Driver, sl.Spec.Pool.Name}
		s.pools[id] = append(s.pools[id], sl)
		if nodeOf(sl) == "" {
			unbound[id] = true
		}
	}
	for id, pool := range s.pools {
		if unbound[id] {
			s.shared = append(s.shared, pool...)
			continue
		}
		seen := map[string]bool{}
		for _, sl := range pool {
			if n := nodeOf(sl); !seen[n] {
				seen[n] = true
				s.onNode[n] = append(s.onNode[n], pool...)
			}
		}
	}
	return s
}

// nodeOf is the one node a slice is for, as the allocator sorts slices: "" for a slice
// that may serve several nodes, and for one with shared counters, which every node's
// allocation reads.
func nodeOf(sl *resourceapi.ResourceSlice) string {
	if len(sl.Spec.SharedCounters) > 0 {
		return ""
	}
	return ptr.Deref(sl.Spec.NodeName, "")
}

// forNode are the slices the allocator may use on node: every slice of every pool it
// can see a slice of, so that the allocator's checks of a pool's completeness, which
// read all of the pool's slices, come out as they would over the whole listing.
func (s *sliceSet) forNode(node string) []*resourceapi.ResourceSlice {
	own := s.onNode[node]
	switch {
	case len(s.shared) == 0:
		return own
	case len(own) == 0:
		return s.shared
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(own)+len(s.shared))
	return append(append(out, own...), s.shared...)
}
