// Package bandwidth is the agent's NIC meter: it keeps the eBPF counters
// attached to the selected interfaces, samples them, and turns them into a
// rate, a windowed peak and the remaining bandwidth per direction.
package bandwidth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"sextant.io/sextant/agent/bandwidth/tc"
)

// CounterSource reads the cumulative counters of every interface it counts.
type CounterSource interface {
	Read() (map[int]Counters, error)
}

// Counters are one interface's cumulative counters.
type Counters struct {
	Ingress Count
	Egress  Count
}

// Attacher starts and stops counting on an interface.
type Attacher interface {
	Attach(ifindex int) error
	Detach(ifindex int) error
	// Verify checks that counting still runs on an attached interface: another tool
	// may have removed the programs (a CNI reinstall deleting the clsact qdisc, a
	// detached tcx link). Its error wraps ErrNotAttached when they are gone; any other
	// error means it could not tell.
	Verify(ifindex int) error
	// Reattach attaches again an interface that Verify found removed.
	Reattach(ifindex int) error
}

// ErrNotAttached is what Attacher.Verify's error wraps when the programs were removed.
var ErrNotAttached = tc.ErrNotAttached

// Config is the meter's configuration; zero values take the defaults.
type Config struct {
	// SampleInterval is how often the counters are read (default 1s).
	SampleInterval time.Duration
	// Window is how far back the peak looks (default 60s).
	Window time.Duration
	// RescanInterval is how often interfaces are listed again to follow
	// NICs that appear and disappear (default 10s).
	RescanInterval time.Duration
	// Interfaces selects interfaces by name or shell pattern (eth*); empty
	// selects what DefaultSelected does.
	Interfaces []string
	// Capacities come from --nic-capacity. They count for virtual
	// interfaces, and for physical NICs whose sysfs speed is not valid.
	Capacities map[string]Capacity
	// Networks are the networks the operator names (--network); the pod network is
	// found without them (see groupNetworks). Their interfaces are metered whatever
	// Interfaces selects.
	Networks []NetworkSpec
	// NodeIPs are the Node's InternalIPs: the interface holding one carries the pod
	// network.
	NodeIPs []net.IP
	Logger  logr.Logger
}

func (c Config) withDefaults() Config {
	if c.SampleInterval <= 0 {
		c.SampleInterval = time.Second
	}
	if c.Window <= 0 {
		c.Window = 60 * time.Second
	}
	if c.RescanInterval <= 0 {
		c.RescanInterval = 10 * time.Second
	}
	if c.Logger.GetSink() == nil {
		c.Logger = klog.Background()
	}
	return c
}

// Snapshot is the meter's view at one sample. Rates are in bits per second.
type Snapshot struct {
	Time time.Time
	// Window is the span the peaks actually cover: the configured window (FullWindow),
	// or less until the meter has measured that long. It counts from when the meter
	// started, or from when the latest of the interfaces with a known capacity (those
	// a node's totals sum) was first sampled, if later: a peak over the few seconds
	// since a start has not seen the bursts a full window would, and the ranker must
	// know (it does not trust a report until its window is full).
	Window time.Duration
	// FullWindow is the configured window.
	FullWindow time.Duration
	Interfaces []InterfaceSample // by name
	// Networks are the node's networks and the interfaces (of Interfaces) that carry
	// each, by name.
	Networks []NetworkSample
}

// NetworkSample is one network in a Snapshot: which of the snapshot's interfaces make
// it up, each counted once.
type NetworkSample struct {
	Name       string
	Interfaces []string
}

// InterfaceSample is one interface in a Snapshot.
type InterfaceSample struct {
	Name  string
	Index int
	// Up is always true: an interface that is down is left out of the snapshot.
	Up      bool
	Ingress DirectionSample
	Egress  DirectionSample
}

// DirectionSample is one direction of an interface. Capacity and Remaining
// are nil when the capacity is unknown.
type DirectionSample struct {
	Capacity  *float64
	Rate      float64
	Peak      float64
	Remaining *float64
	Bytes     uint64
	Packets   uint64
}

// Meter samples the counters of the selected interfaces.
type Meter struct {
	cfg    Config
	links  LinkLister
	src    CounterSource
	att    Attacher
	clock  clock.WithTicker
	log    logr.Logger
	mu     sync.Mutex
	ifaces map[int]*iface
	// networks are the networks as the last rescan grouped them.
	networks []NetworkSample
	// attachFailures counts failed attachments, for sextant_meter_attach_failures_total.
	attachFailures uint64
	// reattachments counts attachments that something else removed and the meter
	// restored, for sextant_meter_reattachments_total.
	reattachments uint64
	snap          Snapshot
	// started is the time of the first sample, zero before it.
	started time.Time
}

type iface struct {
	link     Link
	capacity Capacity
	// lost: something else removed the programs and attaching them again failed, so the
	// counters stand still.
	lost        bool
	ingress     tracker
	egress      tracker
	lastSampled time.Time
}

// New returns a meter; Run drives it.
func New(cfg Config, links LinkLister, src CounterSource, att Attacher, clk clock.WithTicker) *Meter {
	cfg = cfg.withDefaults()
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Meter{cfg: cfg, links: links, src: src, att: att, clock: clk, log: cfg.Logger, ifaces: map[int]*iface{}}
}

// Run rescans and samples until ctx ends, then detaches everything. Errors
// of one interface or one sample are logged, never fatal: other interfaces
// keep being measured.
func (m *Meter) Run(ctx context.Context) error {
	m.Rescan()
	m.Sample()
	sample := m.clock.NewTicker(m.cfg.SampleInterval)
	defer sample.Stop()
	rescan := m.clock.NewTicker(m.cfg.RescanInterval)
	defer rescan.Stop()
	for {
		select {
		case <-ctx.Done():
			return m.Close()
		case <-rescan.C():
			m.Rescan()
		case <-sample.C():
			m.Sample()
		}
	}
}

// Close detaches from every interface.
func (m *Meter) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for idx := range m.ifaces {
		errs = append(errs, m.att.Detach(idx))
		delete(m.ifaces, idx)
	}
	return errors.Join(errs...)
}

// DefaultSelected says whether l is metered when no interfaces are named: the physical
// NICs and the default-route interfaces. Virtual functions left in the host are not
// metered unless named: each would add its physical function's line rate again to the
// node's total.
func DefaultSelected(l Link) bool {
	return l.Physical && !l.VirtualFunction || l.DefaultRoute
}

func (m *Meter) selected(l Link) bool {
	if len(m.cfg.Interfaces) == 0 {
		return DefaultSelected(l)
	}
	for _, pat := range m.cfg.Interfaces {
		if ok, _ := path.Match(pat, l.Name); ok {
			return true
		}
	}
	return false
}

// capacity is the sysfs speed of a physical NIC or a bond when it is valid, else for a
// bond the sum of its up slaves' speeds, else the configured capacity, else unknown (0).
func (m *Meter) capacity(l Link, links []Link) Capacity {
	mbps := int64(0)
	switch {
	case l.Physical || l.Kind == kindBond:
		mbps = l.SpeedMbps
	}
	if mbps <= 0 && l.Kind == kindBond {
		for _, s := range links {
			if s.MasterIndex == l.Index && s.Up && s.Physical {
				mbps += s.SpeedMbps
			}
		}
	}
	if mbps > 0 {
		bps := float64(mbps) * 1e6
		return Capacity{Ingress: bps, Egress: bps}
	}
	return m.cfg.Capacities[l.Name]
}

// meteredLinks is what Rescan meters: the selected interfaces, resolved like a network's
// (a bond's slaves count as their bond, a VLAN as its lower device), so that no bytes
// are counted twice, and every network's interfaces; and the networks.
func (m *Meter) meteredLinks(links []Link) (map[int]Link, []NetworkSample) {
	byIndex := make(map[int]Link, len(links))
	for _, l := range links {
		byIndex[l.Index] = l
	}
	metered := map[int]Link{}
	for _, l := range links {
		if !m.selected(l) {
			continue
		}
		for _, r := range meteredLink(byIndex, l) {
			metered[r.Index] = r
		}
	}
	groups := groupNetworks(links, m.cfg.Networks, m.cfg.NodeIPs)
	networks := make([]NetworkSample, 0, len(groups))
	for name, members := range groups {
		ns := NetworkSample{Name: name}
		for _, l := range members {
			metered[l.Index] = l
			ns.Interfaces = append(ns.Interfaces, l.Name)
		}
		networks = append(networks, ns)
	}
	sort.Slice(networks, func(i, j int) bool { return networks[i].Name < networks[j].Name })
	return metered, networks
}

// Rescan follows interfaces that appeared, disappeared, were renamed, changed speed or
// went down or up, and attaches the meter again where something else removed it.
func (m *Meter) Rescan() {
	links, err := m.links.Links()
	if err != nil {
		m.log.Error(err, "listing interfaces failed; keeping the current ones")
		return
	}
	metered, networks := m.meteredLinks(links)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.networks = networks
	seen := map[int]bool{}
	for _, l := range links {
		if _, ok := metered[l.Index]; !ok {
			continue
		}
		seen[l.Index] = true
		if cur, ok := m.ifaces[l.Index]; ok {
			switch {
			case cur.link.Up && !l.Up:
				m.log.Info("interface is down; leaving it out until it is up again", "interface", l.Name, "ifindex", l.Index)
			case !cur.link.Up && l.Up:
				m.log.Info("interface is up again", "interface", l.Name, "ifindex", l.Index)
			}
			cur.link, cur.capacity = l, m.capacity(l, links)
			m.verify(l.Index, cur)
			continue
		}
		if err := m.att.Attach(l.Index); err != nil {
			m.log.Error(err, "attaching the meter failed; retrying at the next rescan", "interface", l.Name)
			m.attachFailures++
			continue
		}
		// A NIC that is down is attached all the same, so that it is counted from the
		// moment it comes up; Sample leaves it out until then.
		m.log.Info("metering interface", "interface", l.Name, "ifindex", l.Index, "up", l.Up)
		m.ifaces[l.Index] = &iface{
			link:     l,
			capacity: m.capacity(l, links),
			ingress:  tracker{window: m.cfg.Window},
			egress:   tracker{window: m.cfg.Window},
		}
	}
	for idx, cur := range m.ifaces {
		if seen[idx] {
			continue
		}
		m.log.Info("interface gone or deselected; no longer metering it", "interface", cur.link.Name, "ifindex", idx)
		if err := m.att.Detach(idx); err != nil {
			m.log.Error(err, "detaching the meter failed", "interface", cur.link.Name)
		}
		delete(m.ifaces, idx)
	}
}

// verify attaches the meter to the interface again when something else removed it:
// its counters would stand still, and the interface would read as idle, all of its
// capacity free.
func (m *Meter) verify(idx int, cur *iface) {
	err := m.att.Verify(idx)
	switch {
	case err == nil:
		if cur.lost {
			m.restart(cur)
		}
		cur.lost = false
		return
	case !errors.Is(err, ErrNotAttached):
		m.log.Error(err, "checking that the meter is still attached failed; checking again at the next rescan", "interface", cur.link.Name)
		return
	}
	m.log.Error(err, "the meter was removed from the interface by something else; attaching it again", "interface", cur.link.Name, "ifindex", idx)
	// The counters stood still for as long as the programs were gone, which reads as
	// idle: the rates start over, and the window with them, as for a new interface,
	// so no report claims a full window over what was not measured.
	m.restart(cur)
	if err := m.att.Reattach(idx); err != nil {
		m.log.Error(err, "attaching the meter again failed; leaving the interface out and retrying at the next rescan", "interface", cur.link.Name)
		m.attachFailures++
		cur.lost = true
		return
	}
	cur.lost = false
	m.reattachments++
}

// restart forgets the interface's rates and peaks: the next samples start them again.
func (m *Meter) restart(cur *iface) {
	cur.ingress = tracker{window: m.cfg.Window}
	cur.egress = tracker{window: m.cfg.Window}
}

// Sample reads the counters once and updates rates, peaks and the snapshot.
func (m *Meter) Sample() {
	counters, err := m.src.Read()
	now := m.clock.Now()
	if err != nil {
		m.log.Error(err, "reading the counters failed; skipping this sample")
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started.IsZero() {
		m.started = now
	}
	snap := Snapshot{Time: now, FullWindow: m.cfg.Window}
	since := m.started
	for idx, cur := range m.ifaces {
		c := counters[idx] // absent: nothing counted yet
		cur.ingress.observe(now, c.Ingress)
		cur.egress.observe(now, c.Egress)
		if !cur.ingress.haveRate || !cur.egress.haveRate {
			continue // one interval is needed before there is a rate to publish
		}
		// A NIC that is down carries nothing whatever its capacity, and one whose meter
		// is gone reads as idle: published, either would make its network look free.
		// Both are still sampled above, so their peaks carry on when they are back.
		if !cur.link.Up || cur.lost {
			continue
		}
		if cur.capacity.Ingress > 0 || cur.capacity.Egress > 0 {
			since = latest(since, cur.ingress.first, cur.egress.first)
		}
		snap.Interfaces = append(snap.Interfaces, InterfaceSample{
			Name:    cur.link.Name,
			Index:   idx,
			Up:      cur.link.Up,
			Ingress: direction(&cur.ingress, cur.capacity.Ingress),
			Egress:  direction(&cur.egress, cur.capacity.Egress),
		})
	}
	sort.Slice(snap.Interfaces, func(i, j int) bool { return snap.Interfaces[i].Name < snap.Interfaces[j].Name })
	snap.Networks = m.networks
	snap.Window = min(m.cfg.Window, max(now.Sub(since), 0))
	m.snap = snap
}

func latest(t time.Time, more ...time.Time) time.Time {
	for _, u := range more {
		if u.After(t) {
			t = u
		}
	}
	return t
}

func direction(tr *tracker, capacity float64) DirectionSample {
	d := DirectionSample{Rate: tr.rate, Peak: tr.peak(), Bytes: tr.count.Bytes, Packets: tr.count.Packets}
	if capacity > 0 {
		c, r := capacity, max(capacity-d.Peak, 0)
		d.Capacity, d.Remaining = &c, &r
	}
	return d
}

// Attachment is how many interfaces the meter is attached to now, how many
// attachments failed since it started, and how many it restored after something else
// removed them.
func (m *Meter) Attachment() (attached int, failures, reattachments uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, cur := range m.ifaces {
		if !cur.lost {
			attached++
		}
	}
	return attached, m.attachFailures, m.reattachments
}

// Snapshot returns the latest sample; its Time is zero before the first.
func (m *Meter) Snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.snap
	s.Interfaces = append([]InterfaceSample(nil), s.Interfaces...)
	// Rescan replaces m.networks rather than changing it: the slice can be shared.
	return s
}

// String helps logs and test failures.
func (d DirectionSample) String() string {
	f := func(p *float64) string {
		if p == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.0f", *p)
	}
	return fmt.Sprintf("{capacity %s rate %.0f peak %.0f remaining %s bytes %d packets %d}", f(d.Capacity), d.Rate, d.Peak, f(d.Remaining), d.Bytes, d.Packets)
}
