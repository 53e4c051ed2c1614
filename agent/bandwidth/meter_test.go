package bandwidth

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"
)

type fakeSource struct {
	counters map[int]Counters
	err      error
}

func (f *fakeSource) Read() (map[int]Counters, error) {
	out := map[int]Counters{}
	for k, v := range f.counters {
		out[k] = v
	}
	return out, f.err
}

type fakeAttacher struct {
	attached map[int]bool
	fail     map[int]bool
	// lost: something else removed the programs, so the interface's counters froze.
	lost map[int]bool
	// verifyErr: Verify cannot tell (netlink failed, say).
	verifyErr  map[int]error
	reattached map[int]int
}

func (f *fakeAttacher) Attach(i int) error {
	if f.fail[i] {
		return errors.New("attach failed")
	}
	f.attached[i] = true
	return nil
}

func (f *fakeAttacher) Detach(i int) error { delete(f.attached, i); return nil }

func (f *fakeAttacher) Verify(i int) error {
	switch {
	case f.verifyErr[i] != nil:
		return f.verifyErr[i]
	case f.lost[i] || !f.attached[i]:
		return fmt.Errorf("ifindex %d: no sextant filter on clsact ingress: %w", i, ErrNotAttached)
	}
	return nil
}

func (f *fakeAttacher) Reattach(i int) error {
	if f.fail[i] {
		return errors.New("attach failed")
	}
	f.attached[i], f.lost[i] = true, false
	f.reattached[i]++
	return nil
}

type fakeLinks struct {
	links []Link
	err   error
}

func (f *fakeLinks) Links() ([]Link, error) { return f.links, f.err }

func ptr(v float64) *float64 { return &v }

const mbit = 1e6

func newTestMeter(cfg Config, links []Link) (*Meter, *fakeSource, *fakeLinks, *fakeAttacher, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	src := &fakeSource{counters: map[int]Counters{}}
	ll := &fakeLinks{links: links}
	att := &fakeAttacher{attached: map[int]bool{}, fail: map[int]bool{}, lost: map[int]bool{}, verifyErr: map[int]error{}, reattached: map[int]int{}}
	cfg.Logger = logr.Discard()
	return New(cfg, ll, src, att, clk), src, ll, att, clk
}

// TestRatePeakRemaining feeds per-second byte deltas and checks the rate, the
// windowed peak and remaining after each sample.
func TestRatePeakRemaining(t *testing.T) {
	type step struct {
		advance       time.Duration
		ingressDelta  uint64 // bytes since the previous sample
		wantRate      float64
		wantPeak      float64
		wantRemaining *float64 // nil: capacity unknown
	}
	tests := []struct {
		name   string
		window time.Duration
		link   Link
		caps   map[string]Capacity
		steps  []step
	}{{
		name:   "peak holds for the window then expires",
		window: 3 * time.Second,
		link:   Link{Name: "eth0", Index: 2, Up: true, Physical: true, SpeedMbps: 1000},
		steps: []step{
			{time.Second, 12_500_000, 100 * mbit, 100 * mbit, ptr(900 * mbit)},
			{time.Second, 50_000_000, 400 * mbit, 400 * mbit, ptr(600 * mbit)},
			{time.Second, 0, 0, 400 * mbit, ptr(600 * mbit)},
			{time.Second, 25_000_000, 200 * mbit, 400 * mbit, ptr(600 * mbit)},
			// 400M was measured 3s ago: out of the window now.
			{time.Second, 0, 0, 200 * mbit, ptr(800 * mbit)},
			{time.Second, 0, 0, 200 * mbit, ptr(800 * mbit)},
			{time.Second, 0, 0, 0, ptr(1000 * mbit)},
		},
	}, {
		name:   "uneven intervals divide by the real elapsed time",
		window: time.Minute,
		link:   Link{Name: "eth0", Index: 2, Up: true, Physical: true, SpeedMbps: 10000},
		steps: []step{
			{2 * time.Second, 25_000_000, 100 * mbit, 100 * mbit, ptr(9900 * mbit)},
			{500 * time.Millisecond, 25_000_000, 400 * mbit, 400 * mbit, ptr(9600 * mbit)},
		},
	}, {
		name:   "remaining floors at zero",
		window: time.Minute,
		link:   Link{Name: "veth1", Index: 5, Up: true},
		caps:   map[string]Capacity{"veth1": {Ingress: 100 * mbit, Egress: 100 * mbit}},
		steps: []step{
			{time.Second, 25_000_000, 200 * mbit, 200 * mbit, ptr(0)},
		},
	}, {
		name:   "unknown capacity stays unknown",
		window: time.Minute,
		link:   Link{Name: "eth0", Index: 2, Up: true, Physical: true, SpeedMbps: 0},
		steps: []step{
			{time.Second, 1_000_000, 8 * mbit, 8 * mbit, nil},
		},
	}, {
		name:   "sysfs speed of a physical NIC wins over the flag",
		window: time.Minute,
		link:   Link{Name: "eth0", Index: 2, Up: true, Physical: true, SpeedMbps: 1000},
		caps:   map[string]Capacity{"eth0": {Ingress: 10 * mbit, Egress: 10 * mbit}},
		steps: []step{
			{time.Second, 1_000_000, 8 * mbit, 8 * mbit, ptr(992 * mbit)},
		},
	}, {
		name:   "a virtual NIC's made-up speed is ignored for the flag",
		window: time.Minute,
		link:   Link{Name: "veth1", Index: 5, Up: true, SpeedMbps: 10000},
		caps:   map[string]Capacity{"veth1": {Ingress: 200 * mbit, Egress: 300 * mbit}},
		steps: []step{
			{time.Second, 1_000_000, 8 * mbit, 8 * mbit, ptr(192 * mbit)},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, src, _, _, clk := newTestMeter(Config{Window: tt.window, Capacities: tt.caps, Interfaces: []string{"*"}}, []Link{tt.link})
			m.Rescan()
			m.Sample()
			if n := len(m.Snapshot().Interfaces); n != 0 {
				t.Fatalf("first sample published %d interfaces; there is no rate yet", n)
			}
			var total uint64
			for i, s := range tt.steps {
				clk.Step(s.advance)
				total += s.ingressDelta
				src.counters[tt.link.Index] = Counters{Ingress: Count{Bytes: total, Packets: total / 1000}}
				m.Sample()
				snap := m.Snapshot()
				if len(snap.Interfaces) != 1 {
					t.Fatalf("step %d: %d interfaces, want 1", i, len(snap.Interfaces))
				}
				got := snap.Interfaces[0].Ingress
				if !near(got.Rate, s.wantRate) || !near(got.Peak, s.wantPeak) {
					t.Errorf("step %d: rate %.0f peak %.0f, want %.0f and %.0f", i, got.Rate, got.Peak, s.wantRate, s.wantPeak)
				}
				switch {
				case s.wantRemaining == nil && (got.Remaining != nil || got.Capacity != nil):
					t.Errorf("step %d: capacity/remaining %v, want unknown", i, got)
				case s.wantRemaining != nil && (got.Remaining == nil || !near(*got.Remaining, *s.wantRemaining)):
					t.Errorf("step %d: %v, want remaining %.0f", i, got, *s.wantRemaining)
				}
				if got.Bytes != total {
					t.Errorf("step %d: bytes %d, want %d", i, got.Bytes, total)
				}
				if e := snap.Interfaces[0].Egress; e.Rate != 0 || e.Bytes != 0 {
					t.Errorf("step %d: egress %v, want idle (directions swapped?)", i, e)
				}
			}
		})
	}
}

func near(a, b float64) bool {
	d := a - b
	return d < 1e-6*max(1, b) && -d < 1e-6*max(1, b)
}

func TestCounterResetIsANewBaseline(t *testing.T) {
	m, src, _, _, clk := newTestMeter(Config{Window: time.Minute, Interfaces: []string{"eth0"}}, []Link{{Name: "eth0", Index: 2, Up: true}})
	m.Rescan()
	src.counters[2] = Counters{Egress: Count{Bytes: 1_000_000, Packets: 10}}
	m.Sample()
	clk.Step(time.Second)
	src.counters[2] = Counters{Egress: Count{Bytes: 2_000_000, Packets: 20}}
	m.Sample()
	clk.Step(time.Second)
	src.counters[2] = Counters{Egress: Count{Bytes: 100, Packets: 1}} // reloaded
	m.Sample()
	e := m.Snapshot().Interfaces[0].Egress
	if e.Rate != 8*mbit || e.Peak != 8*mbit {
		t.Fatalf("after a reset: %v, want the previous rate kept (8M) and no negative or huge rate", e)
	}
	clk.Step(time.Second)
	src.counters[2] = Counters{Egress: Count{Bytes: 100 + 125_000, Packets: 2}}
	m.Sample()
	if e := m.Snapshot().Interfaces[0].Egress; e.Rate != 1*mbit {
		t.Fatalf("after the new baseline: rate %.0f, want 1M", e.Rate)
	}
}

func TestInterfacesComeAndGoWithoutGaps(t *testing.T) {
	eth0 := Link{Name: "eth0", Index: 2, Up: true, Physical: true}
	eth1 := Link{Name: "eth1", Index: 3, Up: true, Physical: true}
	veth := Link{Name: "veth9", Index: 9, Up: true}
	def := Link{Name: "wg0", Index: 4, Up: true, DefaultRoute: true}
	m, src, ll, att, clk := newTestMeter(Config{}, []Link{eth0, veth, def})
	att.fail[4] = true
	tick := func() {
		clk.Step(time.Second)
		for idx, c := range src.counters {
			c.Ingress.Bytes += 125_000
			src.counters[idx] = c
		}
		m.Sample()
	}
	names := func() string {
		var n []string
		for _, i := range m.Snapshot().Interfaces {
			n = append(n, i.Name)
		}
		return strings.Join(n, ",")
	}
	src.counters[2], src.counters[3], src.counters[4], src.counters[9] = Counters{}, Counters{}, Counters{}, Counters{}
	m.Rescan()
	if att.attached[9] {
		t.Fatal("default selection attached a veth that is neither physical nor the default route")
	}
	m.Sample()
	tick()
	if got := names(); got != "eth0" {
		t.Fatalf("interfaces %q, want eth0 (wg0 failed to attach, veth9 not selected)", got)
	}

	// eth1 appears, the default-route interface attaches on retry.
	att.fail[4] = false
	ll.links = []Link{eth0, eth1, veth, def}
	m.Rescan()
	tick()
	tick()
	if got := names(); got != "eth0,eth1,wg0" {
		t.Fatalf("interfaces %q, want eth0,eth1,wg0", got)
	}
	// Listing fails: nothing changes.
	ll.err = errors.New("netlink busy")
	m.Rescan()
	tick()
	if got := names(); got != "eth0,eth1,wg0" {
		t.Fatalf("after a failed rescan: %q, want all kept", got)
	}
	ll.err = nil
	// eth1 disappears, and a sample fails: eth0 carries on, rate intact.
	ll.links = []Link{eth0, veth, def}
	m.Rescan()
	if att.attached[3] {
		t.Fatal("eth1 is still attached after it disappeared")
	}
	src.err = errors.New("transient")
	m.Sample()
	src.err = nil
	tick()
	snap := m.Snapshot()
	if got := names(); got != "eth0,wg0" {
		t.Fatalf("interfaces %q, want eth0,wg0", got)
	}
	if snap.Interfaces[0].Ingress.Rate != 1*mbit {
		t.Fatalf("eth0 rate %.0f, want 1M unaffected by eth1 leaving", snap.Interfaces[0].Ingress.Rate)
	}
	if err := m.Close(); err != nil || len(att.attached) != 0 {
		t.Fatalf("close: %v, still attached %v", err, att.attached)
	}
}

// TestVirtualFunctionsNotMeteredUnlessNamed: an SR-IOV virtual function left in the
// host is a device too, but the default selection leaves it out; a VF holding the
// default route, or named, is metered.
func TestVirtualFunctionsNotMeteredUnlessNamed(t *testing.T) {
	pf := Link{Name: "ens1f0", Index: 2, Up: true, Physical: true, SpeedMbps: 25000}
	vf := Link{Name: "ens1f0v0", Index: 3, Up: true, Physical: true, VirtualFunction: true, SpeedMbps: 25000}
	vfRoute := Link{Name: "ens1f0v1", Index: 4, Up: true, Physical: true, VirtualFunction: true, SpeedMbps: 25000, DefaultRoute: true}
	for _, tc := range []struct {
		name string
		cfg  Config
		want map[int]bool
	}{
		{"default selection", Config{}, map[int]bool{2: true, 4: true}},
		{"named", Config{Interfaces: []string{"ens1f0*"}}, map[int]bool{2: true, 3: true, 4: true}},
		{"in a network", Config{Networks: []NetworkSpec{{Name: "fabric", Interfaces: []string{"ens1f0v0"}}}}, map[int]bool{2: true, 3: true, 4: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, _, att, _ := newTestMeter(tc.cfg, []Link{pf, vf, vfRoute})
			m.Rescan()
			if fmt.Sprint(att.attached) != fmt.Sprint(tc.want) {
				t.Fatalf("attached %v, want %v", att.attached, tc.want)
			}
		})
	}
}

func TestParseCapacities(t *testing.T) {
	tests := []struct {
		in      []string
		want    map[string]Capacity
		wantErr string
	}{
		{in: nil, want: map[string]Capacity{}},
		{in: []string{"eth0=10G"}, want: map[string]Capacity{"eth0": {10e9, 10e9}}},
		{in: []string{"eth0=ingress:10G,egress:200M", "eth1=25G"}, want: map[string]Capacity{"eth0": {10e9, 200e6}, "eth1": {25e9, 25e9}}},
		{in: []string{"eth0=egress:1500M"}, want: map[string]Capacity{"eth0": {0, 1.5e9}}},
		{in: []string{"eth0"}, wantErr: `"eth0": want IF=RATE or IF=ingress:RATE,egress:RATE`},
		{in: []string{"eth0=fast"}, wantErr: `"eth0=fast": rate "fast" is not a quantity`},
		{in: []string{"eth0=-1G"}, wantErr: `rate "-1G" is not positive`},
		{in: []string{"eth0=1m"}, wantErr: `rate "1m" is below 1 bit/s`},
		{in: []string{"eth0=ingress:1e400"}, wantErr: `rate "1e400" is above 1P bit/s`},
		{in: []string{"eth0=99999999999999999999G"}, wantErr: "above 1P bit/s"},
		{in: []string{"eth0=1P"}, want: map[string]Capacity{"eth0": {1e15, 1e15}}},
		{in: []string{"eth0=up:1G"}, wantErr: `unknown direction "up"`},
		{in: []string{"eth0=1G", "eth0=2G"}, wantErr: "given twice"},
		{in: []string{"eth0=ingress:10G,ingress:1G"}, wantErr: `"eth0=ingress:10G,ingress:1G": direction ingress is given twice`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.in, " "), func(t *testing.T) {
			got, err := ParseCapacities(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s: got %+v, want %+v", k, got[k], v)
				}
			}
		})
	}
}

func TestReadSpeed(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		content string
		want    int64
	}{{"1000\n", 1000}, {"-1\n", 0}, {"0\n", 0}, {"4294967295\n", 0}, {"garbage", 0}, {"", 0}} {
		p := dir + "/speed"
		if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := readSpeed(p); got != tt.want {
			t.Errorf("speed %q: %d, want %d", tt.content, got, tt.want)
		}
	}
	if got := readSpeed(dir + "/absent"); got != 0 {
		t.Errorf("absent speed file: %d, want 0 (no data)", got)
	}
}

// A meter publishes the window it has actually measured: after it starts, and when an
// interface the totals count appears, less than the configured one, growing to it.
func TestObservedWindow(t *testing.T) {
	eth0 := Link{Name: "eth0", Index: 2, Up: true, SpeedMbps: 1000, Physical: true}
	eth1 := Link{Name: "eth1", Index: 3, Up: true, SpeedMbps: 1000, Physical: true}
	veth := Link{Name: "veth9", Index: 9, Up: true} // no capacity: not in the totals
	m, src, ll, _, clk := newTestMeter(Config{Window: 30 * time.Second, Interfaces: []string{"*"}}, []Link{eth0})
	src.counters[2], src.counters[3], src.counters[9] = Counters{}, Counters{}, Counters{}
	m.Rescan()
	m.Sample() // the baseline
	step := func(d time.Duration) Snapshot {
		t.Helper()
		for range int(d / time.Second) {
			clk.Step(time.Second)
			m.Sample()
		}
		return m.Snapshot()
	}
	if s := step(3 * time.Second); s.Window != 3*time.Second || s.FullWindow != 30*time.Second {
		t.Errorf("3s after the start: window %s of %s, want 3s of 30s", s.Window, s.FullWindow)
	}
	if s := step(27 * time.Second); s.Window != 30*time.Second {
		t.Errorf("30s after the start: window %s, want the full 30s", s.Window)
	}
	if s := step(10 * time.Second); s.Window != 30*time.Second {
		t.Errorf("40s after the start: window %s, want 30s", s.Window)
	}
	ll.links = []Link{eth0, veth}
	m.Rescan()
	if s := step(2 * time.Second); s.Window != 30*time.Second || len(s.Interfaces) != 2 {
		t.Errorf("after a NIC without capacity appeared: window %s, %d interfaces; want 30s, 2", s.Window, len(s.Interfaces))
	}
	ll.links = []Link{eth0, eth1, veth}
	m.Rescan()
	if s := step(5 * time.Second); s.Window != 4*time.Second {
		t.Errorf("5 samples after eth1 appeared (its first is its baseline): window %s, want 4s", s.Window)
	}
	if s := step(30 * time.Second); s.Window != 30*time.Second {
		t.Errorf("long after eth1 appeared: window %s, want 30s", s.Window)
	}
}

// A NIC that is down carries nothing, whatever its capacity, so it must not make its
// network look free: a network's remaining is the largest of its NICs', and an idle NIC's
// is its whole capacity. Here eth1 carries 9G of its 10G and eth2, an idle virtio NIC
// whose capacity comes from --nic-capacity (no sysfs speed), is down.
func TestDownNICAddsNoRemaining(t *testing.T) {
	eth1 := Link{Name: "eth1", Index: 3, Up: true, Physical: true}
	eth2 := Link{Name: "eth2", Index: 4, Physical: true} // down: no carrier
	m, src, ll, _, clk := newTestMeter(Config{
		Capacities: map[string]Capacity{"eth1": {10e9, 10e9}, "eth2": {10e9, 10e9}},
		Networks:   []NetworkSpec{{"storage", []string{"eth1", "eth2"}}},
	}, []Link{eth1, eth2})
	src.counters[3], src.counters[4] = Counters{}, Counters{}
	m.Rescan()
	m.Sample()
	// tick carries one second of traffic: 9G on eth1, eth2Bytes on eth2.
	tick := func(eth2Bytes uint64) Snapshot {
		clk.Step(time.Second)
		c := src.counters[3]
		c.Ingress.Bytes += 9e9 / 8
		src.counters[3] = c
		c = src.counters[4]
		c.Ingress.Bytes += eth2Bytes
		src.counters[4] = c
		m.Sample()
		return m.Snapshot()
	}
	check := func(when string, s Snapshot, wantIfaces string, wantRemaining float64) {
		t.Helper()
		var names []string
		for _, i := range s.Interfaces {
			names = append(names, i.Name)
		}
		if got := strings.Join(names, ","); got != wantIfaces {
			t.Errorf("%s: interfaces %q, want %q", when, got, wantIfaces)
		}
		totals := s.NetworkTotals()
		if len(totals) != 1 || totals[0].Ingress.Remaining == nil {
			t.Fatalf("%s: network totals %+v, want storage with a known remaining", when, totals)
		}
		if got := *totals[0].Ingress.Remaining; !near(got, wantRemaining) {
			t.Errorf("%s: storage ingress remaining %.0f, want %.0f", when, got, wantRemaining)
		}
	}
	check("eth2 down", tick(0), "eth1", 1e9)

	eth2.Up = true
	ll.links = []Link{eth1, eth2}
	m.Rescan()
	check("eth2 up, idle", tick(0), "eth1,eth2", 10e9)
	check("eth2 up, carrying 1G", tick(1e9/8), "eth1,eth2", 9e9)

	eth2.Up = false
	ll.links = []Link{eth1, eth2}
	m.Rescan()
	check("eth2 down again", tick(0), "eth1", 1e9)

	// Back up with its counters restarted (a driver reset): a new baseline, not a
	// negative rate, and the 1G it carried within the window still counts.
	eth2.Up = true
	ll.links = []Link{eth1, eth2}
	m.Rescan()
	src.counters[4] = Counters{Ingress: Count{Bytes: 100, Packets: 1}}
	s := tick(0)
	check("eth2 up after a counter reset", s, "eth1,eth2", 9e9)
	if in := s.Interfaces[1].Ingress; in.Rate < 0 || in.Rate > 10e9 {
		t.Errorf("eth2 after a counter reset: %v, want a sane rate", in)
	}
}

// Something else removed the meter from eth0 (a CNI reinstall deleted the clsact qdisc,
// say): its counters froze, and its rate would read 0 and its remaining the whole
// capacity. The next rescan must notice and attach again.
// TestReattachedWindowStartsAgain: while its programs were gone an interface's counters
// stood still, which reads as idle; once attached again its peak covers only what was
// measured since, and the report's window says so.
func TestReattachedWindowStartsAgain(t *testing.T) {
	eth0 := Link{Name: "eth0", Index: 2, Up: true, Physical: true, SpeedMbps: 10000}
	m, src, _, att, clk := newTestMeter(Config{Window: 30 * time.Second}, []Link{eth0})
	src.counters[2] = Counters{}
	m.Rescan()
	m.Sample()
	tick := func(bits uint64) Snapshot {
		clk.Step(time.Second)
		c := src.counters[2]
		c.Ingress.Bytes += bits / 8
		src.counters[2] = c
		m.Sample()
		return m.Snapshot()
	}
	for range 40 {
		tick(9e9)
	}
	if s := m.Snapshot(); s.Window != 30*time.Second {
		t.Fatalf("window %s after 40 s, want 30s", s.Window)
	}
	// Something removes the programs: the counters stand still for 40 s.
	att.lost[2] = true
	for range 40 {
		tick(0)
	}
	m.Rescan()
	tick(1e9)
	if s := tick(1e9); s.Window > 2*time.Second {
		t.Errorf("window %s right after attaching again, want what was measured since (at most 2s)", s.Window)
	}
}

func TestRescanReattachesWhatWasRemoved(t *testing.T) {
	eth0 := Link{Name: "eth0", Index: 2, Up: true, Physical: true, SpeedMbps: 10000}
	eth1 := Link{Name: "eth1", Index: 3, Up: true, Physical: true, SpeedMbps: 10000}
	m, src, _, att, clk := newTestMeter(Config{}, []Link{eth0, eth1})
	src.counters[2], src.counters[3] = Counters{}, Counters{}
	m.Rescan()
	m.Sample()
	att.lost[2] = true
	m.Rescan()
	if att.lost[2] || att.reattached[2] != 1 {
		t.Fatalf("after a rescan: eth0 lost %v, reattached %d times; want attached again once", att.lost[2], att.reattached[2])
	}
	if att.reattached[3] != 0 {
		t.Errorf("eth1, still attached, was reattached %d times", att.reattached[3])
	}

	// Attaching again fails: a failed attachment, retried at the next rescan. Meanwhile
	// eth0's counters stand still, and it is left out rather than read as idle.
	att.lost[2], att.fail[2] = true, true
	m.Rescan()
	clk.Step(time.Second)
	m.Sample()
	if s := m.Snapshot(); len(s.Interfaces) != 1 || s.Interfaces[0].Name != "eth1" {
		t.Errorf("while eth0's meter is gone: interfaces %+v, want eth1 only", s.Interfaces)
	}
	if got := collect(t, m)["sextant_meter_attached_interfaces{,}"]; got != 1 {
		t.Errorf("while eth0's meter is gone: sextant_meter_attached_interfaces = %v, want 1", got)
	}
	att.fail[2] = false
	m.Rescan()
	// Its rates start over: one interval before eth0 has one again.
	for range 2 {
		clk.Step(time.Second)
		m.Sample()
	}
	if s := m.Snapshot(); len(s.Interfaces) != 2 {
		t.Errorf("after eth0 was attached again: interfaces %+v, want eth0 and eth1", s.Interfaces)
	}
	if att.lost[2] || att.reattached[2] != 2 {
		t.Fatalf("after a failed reattachment and a rescan: lost %v, reattached %d times; want attached again", att.lost[2], att.reattached[2])
	}

	// Verify cannot tell: nothing is touched.
	att.verifyErr[2] = errors.New("netlink busy")
	m.Rescan()
	if att.reattached[2] != 2 || !att.attached[2] {
		t.Fatalf("after a failed check: reattached %d times, attached %v; want left alone", att.reattached[2], att.attached[2])
	}

	got := collect(t, m)
	for k, v := range map[string]float64{
		"sextant_meter_attached_interfaces{,}":   2,
		"sextant_meter_attach_failures_total{,}": 1,
		"sextant_meter_reattachments_total{,}":   2,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}
