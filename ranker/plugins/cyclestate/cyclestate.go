// Package cyclestate remembers what a plugin last wrote to a scheduling cycle's
// CycleState, so that the plugin's Filter and Score, called for every node of the cycle,
// get it back without CycleState.Read.
//
// Why: Read is a sync.Map lookup that hashes the key's interface value. NUMAAware,
// BandwidthAware and DeviceAware read their state once per node in Filter and Score,
// over a thousand times per pod at 5000 nodes, which took 0.12 ms of CPU per pod in a
// profile of make bench-ranker (docs/design/0007-cycle-state-memo.md). A scheduling
// cycle runs one pod at a time, so comparing the CycleState with the one last written
// answers nearly all of them.
package cyclestate

import (
	"sync/atomic"

	fwk "k8s.io/kube-scheduler/framework"
)

// Memo is one state key's last write. The zero value is ready to use; a Memo is safe
// for concurrent use.
type Memo[T fwk.StateData] struct {
	key  fwk.StateKey
	last atomic.Pointer[written[T]]
}

type written[T fwk.StateData] struct {
	// state is held, so its address cannot be reused for another cycle's state while
	// this entry stands.
	state fwk.CycleState
	data  T
}

// New returns a Memo for key.
func New[T fwk.StateData](key fwk.StateKey) *Memo[T] { return &Memo[T]{key: key} }

// Write writes data to state at the Memo's key and remembers it. All writes of the key
// must go through Write: a write around it would leave the Memo answering the old data.
func (m *Memo[T]) Write(state fwk.CycleState, data T) {
	state.Write(m.key, data)
	m.last.Store(&written[T]{state: state, data: data})
}

// Read returns what state holds at the Memo's key; ok is false when it holds nothing
// there or something other than a T. States the Memo did not see written last (clones
// for preemption and nominated pods, another cycle) are read from the state itself.
func (m *Memo[T]) Read(state fwk.CycleState) (data T, ok bool) {
	if state == nil {
		return data, false
	}
	if w := m.last.Load(); w != nil && w.state == state {
		return w.data, true
	}
	d, err := state.Read(m.key)
	if err != nil {
		return data, false
	}
	data, ok = d.(T)
	return data, ok
}
