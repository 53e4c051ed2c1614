package draclaims

import (
	"sync"

	resourceapi "k8s.io/api/resource/v1"
)

// SliceIndex groups the cluster's ResourceSlices by pool, and keeps the grouping for
// every pod scheduled while the listed slices stay the same ones: a pod's placement
// looks up a few devices in it, and grouping thousands of slices anew for each pod with
// claims cost more than the lookups. The zero value is ready; a nil *SliceIndex groups
// anew for each pod.
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
}

// byPool is all, the slices as listed now, by driver and pool: the last grouping if
// all lists the same slices. The result is shared: do not modify it.
func (x *SliceIndex) byPool(all []*resourceapi.ResourceSlice) map[poolID][]*resourceapi.ResourceSlice {
	if x == nil {
		return group(all).pools
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.last == nil || !x.last.holdsExactly(all) {
		x.last = group(all)
	}
	return x.last.pools
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
	}
	for _, sl := range all {
		s.members[sl] = struct{}{}
		id := poolID{sl.Spec.Driver, sl.Spec.Pool.Name}
		s.pools[id] = append(s.pools[id], sl)
	}
	return s
}
