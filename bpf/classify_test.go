//go:build linux

package bpf

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

const testMajor = 0x5e47

func newClassifier(t *testing.T) *Classifier {
	t.Helper()
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Skipf("skipping: cannot lift the memlock limit (needs root or CAP_SYS_RESOURCE on old kernels): %v", err)
	}
	c, err := NewClassifier(testMajor)
	if err != nil {
		// A verifier's refusal is a permission error too: only skip where it is one.
		var verr *ebpf.VerifierError
		if errors.Is(err, os.ErrPermission) && !errors.As(err, &verr) {
			t.Skipf("skipping: loading BPF programs needs root or CAP_BPF+CAP_NET_ADMIN: %v", err)
		}
		t.Fatalf("load the classifier: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// skbPriorityOffset is offsetof(struct __sk_buff, priority); skbSize its size.
const (
	skbPriorityOffset = 32
	skbSize           = 192
)

// runPriority runs prog on frame with the skb's priority set to priority, and returns
// the program's verdict and the priority it left.
func runPriority(t *testing.T, prog *ebpf.Program, frame []byte, priority uint32) (verdict, out uint32) {
	t.Helper()
	ctx := make([]byte, skbSize)
	binary.LittleEndian.PutUint32(ctx[skbPriorityOffset:], priority)
	ctxOut := make([]byte, skbSize)
	verdict, err := prog.Run(&ebpf.RunOptions{Data: frame, Context: ctx, ContextOut: ctxOut})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return verdict, binary.LittleEndian.Uint32(ctxOut[skbPriorityOffset:])
}

func TestClassifierSetsThePodsClass(t *testing.T) {
	c := newClassifier(t)
	// The test frames go from 10.0.0.1 to 10.0.0.2, and from fd00::1 to fd00::2.
	const (
		sender   = testMajor<<16 | 0x10
		receiver = testMajor<<16 | 0x11
		sender6  = testMajor<<16 | 0x12
	)
	for a, class := range map[string]uint32{"10.0.0.1": sender, "10.0.0.2": receiver, "fd00::1": sender6} {
		if err := c.SetAddress(netip.MustParseAddr(a), class); err != nil {
			t.Fatal(err)
		}
	}
	arp := ethernet(0x0806, make([]byte, 28))
	arp[14+1] = 1 // hardware type 1: the first nibble of the network header is 0
	for _, tc := range []struct {
		name     string
		prog     *ebpf.Program
		frame    []byte
		priority uint32 // what the packet came with
		want     uint32
	}{
		{"egress ipv4 by source", c.Egress(), ethernet(0x0800, ipv4UDP(100)), 0, sender},
		{"ingress ipv4 by destination", c.Ingress(), ethernet(0x0800, ipv4UDP(100)), 0, receiver},
		{"egress ipv6 by source", c.Egress(), ethernet(0x86dd, ipv6UDP(100)), 0, sender6},
		{"ingress ipv6 unknown destination", c.Ingress(), ethernet(0x86dd, ipv6UDP(100)), 6, 6},
		{"a pod's class overrides the sender's priority", c.Egress(), ethernet(0x0800, ipv4UDP(100)), 4, sender},
		{"arp untouched", c.Egress(), arp, 3, 3},
		// Someone else's priority naming one of the agent's classes must not reach it, nor
		// the qdisc's own handle (HTB's unshaped direct queue).
		{"spoofed class reset", c.Ingress(), ethernet(0x86dd, ipv6UDP(100)), testMajor<<16 | 0x10, 0},
		{"qdisc handle reset", c.Ingress(), ethernet(0x86dd, ipv6UDP(100)), testMajor << 16, 0},
		{"another major untouched", c.Ingress(), ethernet(0x86dd, ipv6UDP(100)), 0x10010, 0x10010},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verdict, got := runPriority(t, tc.prog, tc.frame, tc.priority)
			if verdict != verdictContinue {
				t.Errorf("verdict %d, want TC_ACT_UNSPEC: the classifier never ends the chain", int32(verdict))
			}
			if got != tc.want {
				t.Errorf("priority %#x, want %#x", got, tc.want)
			}
		})
	}
}

func TestClassifierAddressesAndCgroups(t *testing.T) {
	c := newClassifier(t)
	a4, a6 := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::7")
	if err := c.SetAddress(a4, 0x5e470003); err != nil {
		t.Fatal(err)
	}
	if err := c.SetAddress(a6, 0x5e470004); err != nil {
		t.Fatal(err)
	}
	if err := c.SetAddress(netip.Addr{}, 1); err == nil {
		t.Error("SetAddress of no address succeeded")
	}
	got, err := c.Addresses()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[a4] != 0x5e470003 || got[a6] != 0x5e470004 {
		t.Errorf("Addresses = %v", got)
	}
	// An IPv4-mapped address is the IPv4 one.
	if err := c.DeleteAddress(netip.MustParseAddr("::ffff:10.1.2.3")); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAddress(a4); err != nil {
		t.Errorf("deleting an address no longer there: %v", err)
	}
	if got, _ := c.Addresses(); len(got) != 1 {
		t.Errorf("after delete: %v", got)
	}

	for _, id := range []uint64{101, 102} {
		if err := c.SetCgroup(id, 0x5e470005); err != nil {
			t.Fatal(err)
		}
	}
	var n uint32
	if err := c.objs.HostNetworkPods.Get(&n); err != nil || n != 2 {
		t.Errorf("host_network_pods = %d, %v; want 2", n, err)
	}
	for _, id := range []uint64{101, 102, 103} {
		if err := c.DeleteCgroup(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.objs.HostNetworkPods.Get(&n); err != nil || n != 0 {
		t.Errorf("host_network_pods = %d after every cgroup went; want 0 (host traffic skips the lookups)", n)
	}
}

// BenchmarkClassifier is the classifier's own cost per packet, through
// BPF_PROG_TEST_RUN (no tc, no BPF statistics around it): an address it knows, one it
// does not.
func BenchmarkClassifier(b *testing.B) {
	if err := rlimit.RemoveMemlock(); err != nil {
		b.Skip(err)
	}
	c, err := NewClassifier(testMajor)
	if err != nil {
		b.Skip(err)
	}
	defer c.Close()
	if err := c.SetAddress(netip.MustParseAddr("10.0.0.1"), testMajor<<16|3); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"ipv4 known", ethernet(0x0800, ipv4UDP(1472))},
		{"ipv6 unknown", ethernet(0x86dd, ipv6UDP(1452))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			_, per, err := c.Egress().Benchmark(tc.frame, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/packet")
		})
	}
}
