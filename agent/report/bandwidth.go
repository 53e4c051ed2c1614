package report

import (
	"context"
	"math"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"sextant.io/sextant/agent/bandwidth"
	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

const (
	kindBandwidth = "NodeBandwidth"
	kindTopology  = "NodeTopology"
)

// BandwidthConfig says when a NodeBandwidth is worth writing.
type BandwidthConfig struct {
	// Threshold is how far, as a fraction of an interface direction's capacity, its
	// remaining bandwidth must move since the last write to write again (default 0.05).
	Threshold float64
	// MinInterval is the least time between two writes (default 2s).
	MinInterval time.Duration
	// MaxInterval is the most time between two writes, so that silence means a dead
	// agent (default 30s).
	MaxInterval time.Duration
	// AgentVersion goes into the status.
	AgentVersion string
	// Enforcement, if set, says per network whether the agent keeps its guarantees:
	// each network it names gets its condition and guarantees.
	Enforcement func() map[string]Enforcement
}

// Enforcement is what the agent's enforcement says of one network: whether it keeps the
// guarantees there, and what they may and do add up to.
type Enforcement struct {
	Condition  metav1.Condition
	Guarantees *v1alpha1.Guarantees
}

func (c BandwidthConfig) withDefaults() BandwidthConfig {
	if c.Threshold <= 0 {
		c.Threshold = 0.05
	}
	if c.MinInterval <= 0 {
		c.MinInterval = 2 * time.Second
	}
	if c.MaxInterval <= 0 {
		c.MaxInterval = 30 * time.Second
	}
	return c
}

// BandwidthReporter turns the meter's snapshots into NodeBandwidth writes.
type BandwidthReporter struct {
	cfg       BandwidthConfig
	w         *writer
	clock     clock.PassiveClock
	last      *v1alpha1.NodeBandwidthStatus
	lastWrite time.Time
	// lastFull says the last write covered the meter's whole window.
	lastFull bool
	// failedRounds counts the Offers in a row whose write failed (after the writer's own
	// retries); retryAt is when the next may try, so that a node does not press an API
	// server that refuses or sheds its writes every sample interval.
	failedRounds int
	retryAt      time.Time
}

// NewBandwidthReporter returns a reporter for the node's NodeBandwidth.
func NewBandwidthReporter(cfg BandwidthConfig, dyn dynamic.Interface, kube kubernetes.Interface, nodeName string, m *Metrics, clk clock.PassiveClock) *BandwidthReporter {
	return &BandwidthReporter{
		cfg:   cfg.withDefaults(),
		w:     newWriter(kindBandwidth, "nodebandwidths", dyn, kube, nodeName, m),
		clock: clk,
	}
}

// Offer writes the snapshot if it is due, and says whether it wrote. The first
// snapshot whose window is full is due as soon as the minimum interval allows: the
// ranker does not use a report over a shorter window (after the agent starts), so the
// node is eligible again only from that write.
func (r *BandwidthReporter) Offer(ctx context.Context, snap bandwidth.Snapshot) (bool, error) {
	status := BandwidthStatus(snap, r.cfg.AgentVersion)
	if r.cfg.Enforcement != nil {
		addEnforcement(&status, r.cfg.Enforcement())
	}
	now := r.clock.Now()
	full := snap.Window >= snap.FullWindow
	becameFull := r.last != nil && !r.lastFull && full && now.Sub(r.lastWrite) >= r.cfg.MinInterval
	if !becameFull && !bandwidthDue(r.cfg, r.last, r.lastWrite, &status, now) {
		return false, nil
	}
	if now.Before(r.retryAt) {
		return false, nil
	}
	if err := r.w.write(ctx, &status); err != nil {
		r.failedRounds++
		r.retryAt = r.clock.Now().Add(failedRoundDelay(r.cfg, r.failedRounds))
		return false, err
	}
	r.last, r.lastWrite, r.lastFull = &status, now, full
	r.failedRounds, r.retryAt = 0, time.Time{}
	return true, nil
}

// failedRoundDelay is how long after the rounds-th failed write in a row the next may
// be tried: the minimum interval, doubled with each further failure, up to the maximum
// interval. The ranker counts a node's agent silent only after 2 minutes without a
// report, so a recovered API server hears from every agent well before that.
func failedRoundDelay(cfg BandwidthConfig, rounds int) time.Duration {
	d := cfg.MinInterval
	for i := 1; i < rounds && d < cfg.MaxInterval; i++ {
		d *= 2
	}
	return min(d, cfg.MaxInterval)
}

// bandwidthDue decides whether next is worth writing, given what was last written and
// when.
func bandwidthDue(cfg BandwidthConfig, last *v1alpha1.NodeBandwidthStatus, lastWrite time.Time, next *v1alpha1.NodeBandwidthStatus, now time.Time) bool {
	if last == nil {
		return true
	}
	elapsed := now.Sub(lastWrite)
	if elapsed < cfg.MinInterval {
		return false
	}
	if elapsed >= cfg.MaxInterval {
		return true
	}
	if len(last.Interfaces) != len(next.Interfaces) || !sameNetworks(last.Networks, next.Networks) {
		return true
	}
	prev := map[string]v1alpha1.Bandwidth{}
	for _, i := range last.Interfaces {
		prev[i.Name] = i.Bandwidth
	}
	for _, i := range next.Interfaces {
		p, ok := prev[i.Name]
		if !ok || moved(cfg.Threshold, p.Ingress, i.Ingress) || moved(cfg.Threshold, p.Egress, i.Egress) {
			return true
		}
	}
	return false
}

// sameNetworks says whether two reports group the same interfaces into the same
// networks (their figures follow the interfaces', which bandwidthDue compares), and say
// the same of their guarantees: whether they are enforced, and what they add up to.
func sameNetworks(a, b []v1alpha1.NetworkBandwidth) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !slices.Equal(a[i].Interfaces, b[i].Interfaces) ||
			!sameConditions(a[i].Conditions, b[i].Conditions) || !sameGuarantees(a[i].Guarantees, b[i].Guarantees) {
			return false
		}
	}
	return true
}

func sameConditions(a, b []metav1.Condition) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.Condition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message
	})
}

func sameGuarantees(a, b *v1alpha1.Guarantees) bool {
	if a == nil || b == nil {
		return a == b
	}
	same := func(x, y *resource.Quantity) bool { return (x == nil) == (y == nil) && (x == nil || x.Cmp(*y) == 0) }
	return same(a.Ingress.Capacity, b.Ingress.Capacity) && same(a.Ingress.Guaranteed, b.Ingress.Guaranteed) &&
		same(a.Egress.Capacity, b.Egress.Capacity) && same(a.Egress.Guaranteed, b.Egress.Guaranteed)
}

// addEnforcement puts each enforced network's condition and guarantees into status.
func addEnforcement(status *v1alpha1.NodeBandwidthStatus, enf map[string]Enforcement) {
	for i := range status.Networks {
		nw := &status.Networks[i]
		if e, ok := enf[nw.Name]; ok {
			nw.Conditions = []metav1.Condition{e.Condition}
			nw.Guarantees = e.Guarantees
		}
	}
}

// moved says whether one direction changed enough to tell: its capacity came, went or
// changed, or its remaining bandwidth moved by more than threshold × capacity.
func moved(threshold float64, prev, next v1alpha1.DirectionBandwidth) bool {
	if (prev.Capacity == nil) != (next.Capacity == nil) {
		return true
	}
	if next.Capacity == nil {
		return false // unknown capacity: nothing to filter on, the heartbeat suffices
	}
	if prev.Capacity.Cmp(*next.Capacity) != 0 {
		return true
	}
	delta := math.Abs(next.Remaining.AsApproximateFloat64() - prev.Remaining.AsApproximateFloat64())
	return delta > threshold*next.Capacity.AsApproximateFloat64()
}

// BandwidthStatus converts a meter snapshot into a NodeBandwidth status. Total sums, per
// direction, the interfaces whose capacity in that direction is known; it is absent when
// none is.
func BandwidthStatus(snap bandwidth.Snapshot, agentVersion string) v1alpha1.NodeBandwidthStatus {
	sampled := metav1.NewTime(snap.Time.UTC().Truncate(time.Second))
	status := v1alpha1.NodeBandwidthStatus{
		SampleTime:   &sampled,
		Window:       &metav1.Duration{Duration: snap.Window},
		AgentVersion: agentVersion,
		Interfaces:   make([]v1alpha1.InterfaceBandwidth, 0, len(snap.Interfaces)),
	}
	var in, out sum
	for _, i := range snap.Interfaces {
		status.Interfaces = append(status.Interfaces, v1alpha1.InterfaceBandwidth{
			Name: i.Name,
			Bandwidth: v1alpha1.Bandwidth{
				Ingress: direction(i.Ingress),
				Egress:  direction(i.Egress),
			},
		})
		in.add(i.Ingress)
		out.add(i.Egress)
	}
	if in.known || out.known {
		status.Total = &v1alpha1.Bandwidth{Ingress: in.direction(), Egress: out.direction()}
	}
	totals := snap.NetworkTotals()
	for _, nw := range snap.Networks {
		i := slices.IndexFunc(totals, func(t bandwidth.NetworkTotal) bool { return t.Name == nw.Name })
		if i < 0 {
			status.Networks = append(status.Networks, unmeasured(nw.Name))
			continue
		}
		t := totals[i]
		status.Networks = append(status.Networks, v1alpha1.NetworkBandwidth{
			Name: t.Name, Interfaces: t.Interfaces,
			Bandwidth: v1alpha1.Bandwidth{Ingress: direction(t.Ingress), Egress: direction(t.Egress)},
		})
	}
	// Always the pod network, even with nothing measured on it: a report without
	// networks is an agent older than networks to the ranker, which would take Total,
	// the sum over every NIC, for the pod network.
	if !slices.ContainsFunc(status.Networks, func(n v1alpha1.NetworkBandwidth) bool { return n.Name == annotations.PodNetwork }) {
		status.Networks = append(status.Networks, unmeasured(annotations.PodNetwork))
	}
	trim(&status)
	return status
}

// trim cuts the status's lists to the CRD's bounds, which an SR-IOV node's virtual
// functions can pass: beyond them the API server refuses the whole status, and the
// node's report would go stale. Only the lists of names shrink; every figure still
// counts every interface. The pod network is kept.
func trim(status *v1alpha1.NodeBandwidthStatus) {
	if len(status.Interfaces) > v1alpha1.MaxInterfaces {
		status.Interfaces = status.Interfaces[:v1alpha1.MaxInterfaces]
	}
	for i := range status.Networks {
		if nw := &status.Networks[i]; len(nw.Interfaces) > v1alpha1.MaxNetworkInterfaces {
			nw.Interfaces = nw.Interfaces[:v1alpha1.MaxNetworkInterfaces]
		}
	}
	if len(status.Networks) > v1alpha1.MaxNetworks {
		pod := slices.IndexFunc(status.Networks, func(n v1alpha1.NetworkBandwidth) bool { return n.Name == annotations.PodNetwork })
		if pod >= v1alpha1.MaxNetworks {
			status.Networks[v1alpha1.MaxNetworks-1] = status.Networks[pod]
		}
		status.Networks = status.Networks[:v1alpha1.MaxNetworks]
	}
}

// unmeasured is a network none of whose interfaces has a sample yet (not attached, just
// re-created, or none found): its capacity and remaining bandwidth are unknown, so the
// ranker places no pod that requires bandwidth on it.
func unmeasured(name string) v1alpha1.NetworkBandwidth {
	return v1alpha1.NetworkBandwidth{Name: name, Interfaces: []string{}}
}

func direction(d bandwidth.DirectionSample) v1alpha1.DirectionBandwidth {
	return v1alpha1.DirectionBandwidth{
		Capacity:  bitsPerSecond(d.Capacity),
		Rate:      bitsPerSecond(&d.Rate),
		Peak:      bitsPerSecond(&d.Peak),
		Remaining: bitsPerSecond(d.Remaining),
	}
}

// sum adds up the directions whose capacity is known.
type sum struct {
	known                           bool
	capacity, rate, peak, remaining float64
}

func (s *sum) add(d bandwidth.DirectionSample) {
	if d.Capacity == nil || d.Remaining == nil {
		return
	}
	s.known = true
	s.capacity += *d.Capacity
	s.rate += d.Rate
	s.peak += d.Peak
	// Each interface's remaining, not total capacity minus total peak: the interfaces'
	// peaks need not have happened at the same time.
	s.remaining += *d.Remaining
}

func (s *sum) direction() v1alpha1.DirectionBandwidth {
	if !s.known {
		return v1alpha1.DirectionBandwidth{}
	}
	return v1alpha1.DirectionBandwidth{
		Capacity:  bitsPerSecond(&s.capacity),
		Rate:      bitsPerSecond(&s.rate),
		Peak:      bitsPerSecond(&s.peak),
		Remaining: bitsPerSecond(&s.remaining),
	}
}

// bitsPerSecond renders a rate as a quantity rounded to whole kbit/s, which keeps it
// readable (1200M rather than 1200000123) and far finer than any threshold.
func bitsPerSecond(v *float64) *resource.Quantity {
	if v == nil {
		return nil
	}
	kbits := math.Round(math.Max(*v, 0) / 1000)
	return resource.NewQuantity(int64(kbits)*1000, resource.DecimalSI)
}
