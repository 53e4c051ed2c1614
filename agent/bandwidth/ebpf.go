package bandwidth

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"sextant.io/sextant/agent/bandwidth/tc"
	"sextant.io/sextant/bpf"
)

// BPF is the meter's eBPF side: the counters map, one copy of the programs
// per metered interface, and their attachment. It is both the meter's
// CounterSource and its Attacher.
type BPF struct {
	counters *bpf.Counters
	att      tc.Attacher
	ncpu     int

	mu       sync.Mutex
	attached map[int]*bound // by ifindex
	free     []uint32       // slots to hand out, lowest last
}

type bound struct {
	slot  uint32
	progs *bpf.MeterPrograms
}

// LoadBPF creates the counters map. Needs CAP_BPF and CAP_NET_ADMIN (or
// root).
func LoadBPF(opts tc.Options) (*BPF, error) {
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("lift memlock limit: %w", err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count possible cpus: %w", err)
	}
	att, err := tc.New(opts)
	if err != nil {
		return nil, err
	}
	counters, err := bpf.NewCounters()
	if err != nil {
		return nil, err
	}
	b := &BPF{counters: counters, att: att, ncpu: ncpu, attached: map[int]*bound{}}
	for s := int(counters.Slots) - 1; s >= 0; s-- {
		b.free = append(b.free, uint32(s))
	}
	return b, nil
}

// Mode is how the programs are attached ("tcx" or "clsact").
func (b *BPF) Mode() string { return b.att.Mode() }

// Attach starts counting on the interface from zero.
func (b *BPF) Attach(ifindex int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.attached[ifindex]; ok {
		return nil
	}
	return b.attach(ifindex)
}

func (b *BPF) attach(ifindex int) error {
	if len(b.free) == 0 {
		return fmt.Errorf("cannot meter ifindex %d: all %d slots are in use", ifindex, b.counters.Slots)
	}
	slot := b.free[len(b.free)-1]
	// A slot is zeroed when handed out, so a reused one starts from zero.
	if err := b.zero(slot); err != nil {
		return err
	}
	progs, err := b.counters.LoadPrograms(slot)
	if err != nil {
		return err
	}
	if err := b.att.Attach(ifindex, tc.Programs{Ingress: progs.SextantIngress, Egress: progs.SextantEgress}); err != nil {
		progs.Close()
		return err
	}
	b.free = b.free[:len(b.free)-1]
	b.attached[ifindex] = &bound{slot: slot, progs: progs}
	return nil
}

// Verify checks that the interface's programs are still attached on both hooks; its
// error wraps ErrNotAttached when something else removed them.
func (b *BPF) Verify(ifindex int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.attached[ifindex]; !ok {
		return fmt.Errorf("ifindex %d: %w", ifindex, ErrNotAttached)
	}
	return b.att.Verify(ifindex)
}

// Reattach attaches the interface's programs again after Verify found them removed.
// They keep their slot, so the counters carry on from where they stopped instead of
// restarting from zero.
func (b *BPF) Reattach(ifindex int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	bd, ok := b.attached[ifindex]
	if !ok {
		return b.attach(ifindex)
	}
	if err := b.att.Reattach(ifindex, tc.Programs{Ingress: bd.progs.SextantIngress, Egress: bd.progs.SextantEgress}); err != nil {
		return fmt.Errorf("reattach to ifindex %d: %w", ifindex, err)
	}
	return nil
}

func (b *BPF) zero(slot uint32) error {
	zero := make([]bpf.MeterCounters, b.ncpu)
	for _, dir := range []uint32{bpf.DirectionIngress, bpf.DirectionEgress} {
		if err := b.counters.Map.Update(bpf.Index(slot, dir), zero, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("zero counters of slot %d: %w", slot, err)
		}
	}
	return nil
}

// Detach stops counting on the interface and frees its slot.
func (b *BPF) Detach(ifindex int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.detach(ifindex)
}

func (b *BPF) detach(ifindex int) error {
	bd, ok := b.attached[ifindex]
	if !ok {
		return nil
	}
	err := b.att.Detach(ifindex)
	if err != nil {
		// The programs may still be running: keep the slot out of use.
		return fmt.Errorf("detach from ifindex %d: %w", ifindex, err)
	}
	delete(b.attached, ifindex)
	bd.progs.Close()
	b.free = append(b.free, bd.slot)
	return nil
}

// Read sums the per-CPU counters of every attached interface.
func (b *BPF) Read() (map[int]Counters, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[int]Counters, len(b.attached))
	var perCPU []bpf.MeterCounters
	for ifindex, bd := range b.attached {
		var c [2]Count
		for i, dir := range []uint32{bpf.DirectionIngress, bpf.DirectionEgress} {
			if err := b.counters.Map.Lookup(bpf.Index(bd.slot, dir), &perCPU); err != nil {
				return nil, fmt.Errorf("read counters of ifindex %d: %w", ifindex, err)
			}
			for _, v := range perCPU {
				c[i].Bytes += v.Bytes
				c[i].Packets += v.Packets
			}
		}
		out[ifindex] = Counters{Ingress: c[0], Egress: c[1]}
	}
	return out, nil
}

// Close detaches everywhere and releases the programs and the map.
func (b *BPF) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for ifindex := range b.attached {
		errs = append(errs, b.detach(ifindex))
	}
	errs = append(errs, b.att.Close())
	for _, bd := range b.attached { // left over where detaching failed
		bd.progs.Close()
	}
	return errors.Join(append(errs, b.counters.Close())...)
}
