//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// verdictContinue is TC_ACT_UNSPEC (== TCX_NEXT) as the kernel returns it
// through BPF_PROG_TEST_RUN.
const verdictContinue = ^uint32(0)

func newCounters(t testing.TB) *Counters {
	t.Helper()
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Skipf("skipping: cannot lift the memlock limit (needs root or CAP_SYS_RESOURCE on old kernels): %v", err)
	}
	c, err := NewCounters()
	if err != nil {
		// A verifier's refusal is a permission error too: only skip where it is one.
		var verr *ebpf.VerifierError
		if errors.Is(err, os.ErrPermission) && !errors.As(err, &verr) {
			t.Skipf("skipping: loading BPF programs needs root or CAP_BPF+CAP_NET_ADMIN: %v", err)
		}
		t.Fatalf("create counters: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func loadPrograms(t testing.TB, c *Counters, slot uint32) *MeterPrograms {
	t.Helper()
	p, err := c.LoadPrograms(slot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Frames of known length, built by hand so that the test does not depend on a
// packet library. Payloads are zero: the programs must not look at them.
func ethernet(etherType uint16, payload []byte) []byte {
	f := make([]byte, 14, 14+len(payload))
	copy(f[0:6], []byte{0x02, 0, 0, 0, 0, 1})
	copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 2})
	binary.BigEndian.PutUint16(f[12:14], etherType)
	return append(f, payload...)
}

func ipv4UDP(payloadLen int) []byte {
	p := make([]byte, 20+8+payloadLen)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:4], uint16(len(p)))
	p[8] = 64
	p[9] = 17 // UDP
	copy(p[12:16], []byte{10, 0, 0, 1})
	copy(p[16:20], []byte{10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[24:26], uint16(8+payloadLen))
	return p
}

func ipv6UDP(payloadLen int) []byte {
	p := make([]byte, 40+8+payloadLen)
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:6], uint16(8+payloadLen))
	p[6] = 17 // UDP
	p[7] = 64
	p[8], p[23] = 0xfd, 1
	p[24], p[39] = 0xfd, 2
	binary.BigEndian.PutUint16(p[44:46], uint16(8+payloadLen))
	return p
}

func vlan(vid uint16, innerType uint16, payload []byte) []byte {
	tag := make([]byte, 4, 4+len(payload))
	binary.BigEndian.PutUint16(tag[0:2], vid)
	binary.BigEndian.PutUint16(tag[2:4], innerType)
	return ethernet(0x8100, append(tag, payload...))
}

func readCounters(t *testing.T, m *ebpf.Map, slot, direction uint32) MeterCounters {
	t.Helper()
	var perCPU []MeterCounters
	if err := m.Lookup(Index(slot, direction), &perCPU); err != nil {
		t.Fatalf("lookup counters: %v", err)
	}
	var sum MeterCounters
	for _, c := range perCPU {
		sum.Bytes += c.Bytes
		sum.Packets += c.Packets
	}
	return sum
}

func TestMeterCountsFrames(t *testing.T) {
	frames := []struct {
		name  string
		frame []byte
		want  int // the L2 length, spelled out to catch a wrong builder
	}{
		{"ipv4 minimum", ipv4UDP(18), 14 + 20 + 8 + 18},
		{"ipv4 1500 mtu", ipv4UDP(1472), 1514},
		{"ipv6", ipv6UDP(100), 14 + 40 + 8 + 100},
		{"ipv6 1500 mtu", ipv6UDP(1452), 1514},
		{"vlan ipv4", nil, 14 + 4 + 20 + 8 + 200},
		{"vlan ipv6", nil, 14 + 4 + 40 + 8 + 1000},
	}
	frames[0].frame = ethernet(0x0800, frames[0].frame)
	frames[1].frame = ethernet(0x0800, frames[1].frame)
	frames[2].frame = ethernet(0x86dd, frames[2].frame)
	frames[3].frame = ethernet(0x86dd, frames[3].frame)
	frames[4].frame = vlan(42, 0x0800, ipv4UDP(200))
	frames[5].frame = vlan(42, 0x86dd, ipv6UDP(1000))

	directions := []struct {
		name string
		dir  uint32
		prog func(*MeterPrograms) *ebpf.Program
	}{
		{"ingress", DirectionIngress, func(o *MeterPrograms) *ebpf.Program { return o.SextantIngress }},
		{"egress", DirectionEgress, func(o *MeterPrograms) *ebpf.Program { return o.SextantEgress }},
	}

	for _, d := range directions {
		for _, f := range frames {
			t.Run(d.name+"/"+f.name, func(t *testing.T) {
				if len(f.frame) != f.want {
					t.Fatalf("test frame is %d bytes, want %d", len(f.frame), f.want)
				}
				counters := newCounters(t)
				// Two interfaces' programs share the map: only the one
				// that ran may count.
				const slot, otherSlot = 5, 6
				progs := loadPrograms(t, counters, slot)
				loadPrograms(t, counters, otherSlot)
				const repeat = 3
				for i := 0; i < repeat; i++ {
					in := append([]byte(nil), f.frame...)
					out := make([]byte, len(in))
					verdict, err := d.prog(progs).Run(&ebpf.RunOptions{Data: in, DataOut: out})
					if err != nil {
						t.Fatalf("run: %v", err)
					}
					if verdict != verdictContinue {
						t.Fatalf("verdict %d, want TC_ACT_UNSPEC (-1): the meter must pass every packet on", int32(verdict))
					}
					if string(out) != string(f.frame) {
						t.Fatalf("the program changed the packet")
					}
				}

				got := readCounters(t, counters.Map, slot, d.dir)
				want := MeterCounters{Bytes: uint64(repeat * f.want), Packets: repeat}
				if got != want {
					t.Errorf("%s counters = %+v, want %+v", d.name, got, want)
				}
				other := DirectionIngress + DirectionEgress - d.dir
				if c := readCounters(t, counters.Map, slot, other); c != (MeterCounters{}) {
					t.Errorf("the other direction counted %+v, want nothing", c)
				}
				for _, dir := range []uint32{DirectionIngress, DirectionEgress} {
					if c := readCounters(t, counters.Map, otherSlot, dir); c != (MeterCounters{}) {
						t.Errorf("another interface's slot counted %+v, want nothing", c)
					}
				}
			})
		}
	}
}

func TestMeterAccumulatesMixedSizes(t *testing.T) {
	counters := newCounters(t)
	objs := loadPrograms(t, counters, 0)
	var wantBytes uint64
	// BPF_PROG_TEST_RUN takes at most about a page of packet data.
	sizes := []int{18, 100, 1472, 3000}
	for _, n := range sizes {
		frame := ethernet(0x0800, ipv4UDP(n))
		wantBytes += uint64(len(frame))
		if v, err := objs.SextantEgress.Run(&ebpf.RunOptions{Data: frame}); err != nil || v != verdictContinue {
			t.Fatalf("run: verdict %d, err %v", int32(v), err)
		}
	}
	got := readCounters(t, counters.Map, 0, DirectionEgress)
	if got.Bytes != wantBytes || got.Packets != uint64(len(sizes)) {
		t.Errorf("counters = %+v, want %d bytes in %d packets", got, wantBytes, len(sizes))
	}
}

// BenchmarkMeter reports the programs' own cost per packet, measured by the
// kernel over BPF_PROG_TEST_RUN repeats (no bpf_stats clock reads included).
func BenchmarkMeter(b *testing.B) {
	objs := loadPrograms(b, newCounters(b), 0)
	frame := ethernet(0x0800, ipv4UDP(1472))
	b.ResetTimer()
	_, perRun, err := objs.SextantIngress.Benchmark(frame, b.N, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(perRun.Nanoseconds()), "kernel-ns/packet")
}

func TestSlotOutOfRangeIsRefused(t *testing.T) {
	c := newCounters(t)
	if _, err := c.LoadPrograms(c.Slots); err == nil {
		t.Fatalf("slot %d loaded; the map only holds %d", c.Slots, c.Slots)
	}
}
