package bpf

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Counters holds every interface's counters; see meter.c.
type Counters struct {
	spec *ebpf.CollectionSpec
	Map  *ebpf.Map
	// Slots is how many interfaces fit.
	Slots uint32
}

// NewCounters creates the counters map in the kernel.
func NewCounters() (*Counters, error) {
	spec, err := LoadMeter()
	if err != nil {
		return nil, err
	}
	ms := spec.Maps[MeterMapNicCounters]
	m, err := ebpf.NewMap(ms)
	if err != nil {
		return nil, fmt.Errorf("create counters map: %w", err)
	}
	return &Counters{spec: spec, Map: m, Slots: ms.MaxEntries / 2}, nil
}

// Index is the map index of a slot's counters in one direction.
func Index(slot, direction uint32) uint32 { return slot*2 + direction }

// LoadPrograms loads a copy of the programs that counts into slot.
func (c *Counters) LoadPrograms(slot uint32) (*MeterPrograms, error) {
	if slot >= c.Slots {
		return nil, fmt.Errorf("slot %d out of range (the map holds %d)", slot, c.Slots)
	}
	spec := c.spec.Copy()
	if err := spec.Variables[MeterVarSlot].Set(slot); err != nil {
		return nil, fmt.Errorf("set slot: %w", err)
	}
	var progs MeterPrograms
	err := spec.LoadAndAssign(&progs, &ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{MeterMapNicCounters: c.Map},
	})
	if err != nil {
		return nil, fmt.Errorf("load meter programs: %w", err)
	}
	return &progs, nil
}

// Close removes the map (once no program uses it any more).
func (c *Counters) Close() error { return c.Map.Close() }
