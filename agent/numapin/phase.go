package numapin

import "strconv"

// phase is how far this process has carried out one annotated pod's decision. It only
// moves forward; next holds every move.
type phase uint8

const (
	// phaseUndecided: the annotation is not yet a cpuset of this node (not read yet, or
	// refused).
	phaseUndecided phase = iota
	// phaseDecided: the cpuset is known; the pod's cgroup is not looked at yet.
	phaseDecided
	// phaseFresh: the pod had no container cgroup when first looked at, so its pin is
	// its first, and counted even if the cgroup already held the set.
	phaseFresh
	// phaseFound: the pod had container cgroups when first looked at (this process
	// started after them): a cgroup already holding the set is not a pin of this
	// process's.
	phaseFound
	// phaseNarrowed: this process narrowed the pod's cgroup; no container cgroup is
	// inside it yet.
	phaseNarrowed
	// phaseConfirmed: the pod's cgroup held the set with a container cgroup inside it;
	// the pod counts as pinned.
	phaseConfirmed
)

func (ph phase) String() string {
	switch ph {
	case phaseUndecided:
		return "undecided"
	case phaseDecided:
		return "decided"
	case phaseFresh:
		return "fresh"
	case phaseFound:
		return "found"
	case phaseNarrowed:
		return "narrowed"
	case phaseConfirmed:
		return "confirmed"
	}
	return "phase(" + strconv.Itoa(int(ph)) + ")"
}

// step is what happened to a pod that may move its phase.
type step uint8

const (
	// stepDecide: the annotation was turned into the cpuset to enforce.
	stepDecide step = iota
	// stepLookEmpty: the pod's cgroup was looked at (or is not there yet) and holds no
	// container cgroup.
	stepLookEmpty
	// stepLookRunning: the pod's cgroup was looked at and holds container cgroups.
	stepLookRunning
	// stepNarrow: this process wrote the set into the pod's cgroup.
	stepNarrow
	// stepConfirm: the pod's cgroup holds the set with a container cgroup inside it.
	stepConfirm
)

func (s step) String() string {
	switch s {
	case stepDecide:
		return "decide"
	case stepLookEmpty:
		return "look-empty"
	case stepLookRunning:
		return "look-running"
	case stepNarrow:
		return "narrow"
	case stepConfirm:
		return "confirm"
	}
	return "step(" + strconv.Itoa(int(s)) + ")"
}

// next is the phase after s. A step that does not apply leaves the phase as it is: only
// the first look at a pod says whether its pin is its first, and a confirmed pod
// narrowed again (a repair) stays confirmed.
func (ph phase) next(s step) phase {
	switch {
	case ph == phaseUndecided && s == stepDecide:
		return phaseDecided
	case ph == phaseDecided && s == stepLookEmpty:
		return phaseFresh
	case ph == phaseDecided && s == stepLookRunning:
		return phaseFound
	case (ph == phaseFresh || ph == phaseFound || ph == phaseNarrowed) && s == stepNarrow:
		return phaseNarrowed
	case (ph == phaseFresh || ph == phaseFound || ph == phaseNarrowed) && s == stepConfirm:
		return phaseConfirmed
	}
	return ph
}

// advance moves the pod's phase by s and says from which phase, and whether it moved.
func (st *podState) advance(s step) (from phase, moved bool) {
	from = st.phase
	st.phase = from.next(s)
	return from, st.phase != from
}

// decided says the annotation was turned into a cpuset.
func (st *podState) decided() bool { return st.phase != phaseUndecided }

// confirmed says the pod counts as pinned.
func (st *podState) confirmed() bool { return st.phase == phaseConfirmed }
