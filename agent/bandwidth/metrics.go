package bandwidth

import "github.com/prometheus/client_golang/prometheus"

var (
	descBytes = prometheus.NewDesc("sextant_nic_bytes_total",
		"Bytes the eBPF meter counted on the interface (L2 frame length, as the kernel's interface statistics count it).",
		[]string{"interface", "direction"}, nil)
	descPackets = prometheus.NewDesc("sextant_nic_packets_total",
		"Packets (skbs, so a GSO/GRO aggregate counts once) the eBPF meter counted on the interface.",
		[]string{"interface", "direction"}, nil)
	descCapacity = prometheus.NewDesc("sextant_nic_capacity_bytes_per_second",
		"What the interface can carry in this direction; absent when unknown.",
		[]string{"interface", "direction"}, nil)
	descRate = prometheus.NewDesc("sextant_nic_rate_bytes_per_second",
		"Rate over the last sample interval.",
		[]string{"interface", "direction"}, nil)
	descPeak = prometheus.NewDesc("sextant_nic_peak_bytes_per_second",
		"Highest sampled rate within the peak window.",
		[]string{"interface", "direction"}, nil)
	descRemaining = prometheus.NewDesc("sextant_nic_remaining_bytes_per_second",
		"Capacity minus peak, floored at 0; absent when the capacity is unknown.",
		[]string{"interface", "direction"}, nil)

	descAttached = prometheus.NewDesc("sextant_meter_attached_interfaces",
		"Interfaces the eBPF meter is attached to now; 0 on a node whose meter measures nothing.",
		nil, nil)
	descAttachFailures = prometheus.NewDesc("sextant_meter_attach_failures_total",
		"Attachments of the eBPF meter to an interface that failed (each is retried at the next rescan).",
		nil, nil)
	descReattachments = prometheus.NewDesc("sextant_meter_reattachments_total",
		"Times the eBPF meter found its programs removed from an interface by something else (a deleted clsact qdisc or filter, a detached tcx link) and attached them again.",
		nil, nil)

	descNetCapacity = prometheus.NewDesc("sextant_network_capacity_bytes_per_second",
		"What the network's interfaces can carry together in this direction; absent when no interface's capacity is known.",
		[]string{"network", "direction"}, nil)
	descNetRate = prometheus.NewDesc("sextant_network_rate_bytes_per_second",
		"The network's interfaces' rates over the last sample interval, summed.",
		[]string{"network", "direction"}, nil)
	descNetPeak = prometheus.NewDesc("sextant_network_peak_bytes_per_second",
		"The network's interfaces' peaks within the window, summed.",
		[]string{"network", "direction"}, nil)
	descNetRemaining = prometheus.NewDesc("sextant_network_remaining_bytes_per_second",
		"The largest remaining of any one of the network's interfaces: what the ranker lets a pod on this network require.",
		[]string{"network", "direction"}, nil)
)

// Collector exports the meter's latest snapshot in base units (bytes).
type Collector struct{ m *Meter }

// NewCollector returns a prometheus.Collector for the meter.
func NewCollector(m *Meter) *Collector { return &Collector{m: m} }

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBytes, descPackets, descCapacity, descRate, descPeak, descRemaining,
		descNetCapacity, descNetRate, descNetPeak, descNetRemaining, descAttached, descAttachFailures, descReattachments} {
		ch <- d
	}
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	attached, failures, reattachments := c.m.Attachment()
	ch <- prometheus.MustNewConstMetric(descAttached, prometheus.GaugeValue, float64(attached))
	ch <- prometheus.MustNewConstMetric(descAttachFailures, prometheus.CounterValue, float64(failures))
	ch <- prometheus.MustNewConstMetric(descReattachments, prometheus.CounterValue, float64(reattachments))
	snap := c.m.Snapshot()
	for _, n := range snap.NetworkTotals() {
		for _, d := range []struct {
			name string
			s    DirectionSample
		}{{"ingress", n.Ingress}, {"egress", n.Egress}} {
			ch <- prometheus.MustNewConstMetric(descNetRate, prometheus.GaugeValue, d.s.Rate/8, n.Name, d.name)
			ch <- prometheus.MustNewConstMetric(descNetPeak, prometheus.GaugeValue, d.s.Peak/8, n.Name, d.name)
			if d.s.Capacity != nil {
				ch <- prometheus.MustNewConstMetric(descNetCapacity, prometheus.GaugeValue, *d.s.Capacity/8, n.Name, d.name)
				ch <- prometheus.MustNewConstMetric(descNetRemaining, prometheus.GaugeValue, *d.s.Remaining/8, n.Name, d.name)
			}
		}
	}
	for _, i := range snap.Interfaces {
		for _, d := range []struct {
			name string
			s    DirectionSample
		}{{"ingress", i.Ingress}, {"egress", i.Egress}} {
			ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(d.s.Bytes), i.Name, d.name)
			ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(d.s.Packets), i.Name, d.name)
			ch <- prometheus.MustNewConstMetric(descRate, prometheus.GaugeValue, d.s.Rate/8, i.Name, d.name)
			ch <- prometheus.MustNewConstMetric(descPeak, prometheus.GaugeValue, d.s.Peak/8, i.Name, d.name)
			if d.s.Capacity != nil {
				ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, *d.s.Capacity/8, i.Name, d.name)
				ch <- prometheus.MustNewConstMetric(descRemaining, prometheus.GaugeValue, *d.s.Remaining/8, i.Name, d.name)
			}
		}
	}
}
