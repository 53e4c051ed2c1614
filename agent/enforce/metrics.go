package enforce

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descEnforced = prometheus.NewDesc("sextant_enforcement_guarantees_enforced",
		"1 while the agent keeps the guarantees on the network (its GuaranteesEnforced condition is True), 0 while enforcement is turned on for it but failing.",
		[]string{"network"}, nil)
	descCapacity = prometheus.NewDesc("sextant_enforcement_guarantee_capacity_bytes_per_second",
		"What the required rates of the network's pods may add up to in this direction.",
		[]string{"network", "direction"}, nil)
	descGuaranteed = prometheus.NewDesc("sextant_enforcement_guaranteed_bytes_per_second",
		"What the required rates the agent keeps on the network add up to, pods not started yet included.",
		[]string{"network", "direction"}, nil)
	descGuaranteedBytes = prometheus.NewDesc("sextant_enforcement_guaranteed_bytes_total",
		"Bytes the network's pods sent or received within their guaranteed rates.",
		[]string{"network", "direction"}, nil)
	descBorrowedBytes = prometheus.NewDesc("sextant_enforcement_borrowed_bytes_total",
		"Bytes beyond a class's own rate: borrowed from what no pod reserved or a reserved pod left unused.",
		[]string{"network", "direction"}, nil)
	descUnreservedBytes = prometheus.NewDesc("sextant_enforcement_unreserved_bytes_total",
		"Bytes of traffic no pod's class claims (the node's own, pods without annotations) within the rate left to it.",
		[]string{"network", "direction"}, nil)
	descDrops = prometheus.NewDesc("sextant_enforcement_class_dropped_packets_total",
		"Packets a shaping class dropped, summed over the network's interfaces; pod empty for the class of traffic no pod claims.",
		[]string{"network", "direction", "namespace", "pod"}, nil)
	descOverlimits = prometheus.NewDesc("sextant_enforcement_class_overlimits_total",
		"Times a shaping class was over its rate or ceiling and had to borrow or wait, summed over the network's interfaces.",
		[]string{"network", "direction", "namespace", "pod"}, nil)
	descUnmet = prometheus.NewDesc("sextant_enforcement_guarantee_unmet",
		"1 for each pod that, within the window, had packets waiting or dropped while it got less than its required rate.",
		[]string{"network", "direction", "namespace", "pod"}, nil)
	descUnmetPods = prometheus.NewDesc("sextant_enforcement_guarantee_unmet_pods",
		"How many pods sextant_enforcement_guarantee_unmet names.",
		[]string{"network", "direction"}, nil)
	descShortfalls = prometheus.NewDesc("sextant_enforcement_shortfall_pods",
		"Pods on the node whose required rate the node cannot keep: the guarantees of the pods bound before them fill the network (a pod placed by another scheduler).",
		[]string{"network", "direction"}, nil)
	descReconciles = prometheus.NewDesc("sextant_enforcement_reconciles_total",
		"Passes that made the node's shaping match its pods; result ok or error.",
		[]string{"result"}, nil)
	descShapedInterfaces = prometheus.NewDesc("sextant_enforcement_shaped_interfaces",
		"Interfaces the agent shapes now.",
		nil, nil)
)

// collector exports the enforcer's view in base units.
type collector struct{ e *Enforcer }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEnforced, descCapacity, descGuaranteed, descGuaranteedBytes, descBorrowedBytes,
		descUnreservedBytes, descDrops, descOverlimits, descUnmet, descUnmetPods, descShortfalls, descReconciles, descShapedInterfaces} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	unmet := e.acct.unmet()
	unmetPods := map[classKey]int{}
	for k := range unmet {
		unmetPods[classKey{network: k.network, direction: k.direction}]++
	}
	for _, st := range e.status {
		v := 0.0
		if st.Enforced {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descEnforced, prometheus.GaugeValue, v, st.Network)
		if !st.Enforced {
			continue
		}
		for _, d := range Directions {
			ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(st.Capacity[d])/8, st.Network, d.String())
			ch <- prometheus.MustNewConstMetric(descGuaranteed, prometheus.GaugeValue, float64(st.Guaranteed[d])/8, st.Network, d.String())
			ch <- prometheus.MustNewConstMetric(descShortfalls, prometheus.GaugeValue, float64(st.Shortfalls[d]), st.Network, d.String())
			ch <- prometheus.MustNewConstMetric(descUnmetPods, prometheus.GaugeValue, float64(unmetPods[classKey{network: st.Network, direction: d}]), st.Network, d.String())
		}
	}
	for k, t := range e.acct.totals {
		ch <- prometheus.MustNewConstMetric(descGuaranteedBytes, prometheus.CounterValue, t.guaranteed, k.network, k.direction.String())
		ch <- prometheus.MustNewConstMetric(descBorrowedBytes, prometheus.CounterValue, t.borrowed, k.network, k.direction.String())
		ch <- prometheus.MustNewConstMetric(descUnreservedBytes, prometheus.CounterValue, t.unreserved, k.network, k.direction.String())
	}
	// Per class, summed over the network's interfaces.
	type sums struct{ drops, overlimits uint64 }
	perPod := map[classKey]*sums{}
	for k, c := range e.acct.current {
		pk := k.podKey()
		s := perPod[pk]
		if s == nil {
			s = &sums{}
			perPod[pk] = s
		}
		s.drops += c.drops
		s.overlimits += c.overlimits
	}
	for k, s := range perPod {
		ns, name := e.podName(k.pod)
		ch <- prometheus.MustNewConstMetric(descDrops, prometheus.CounterValue, float64(s.drops), k.network, k.direction.String(), ns, name)
		ch <- prometheus.MustNewConstMetric(descOverlimits, prometheus.CounterValue, float64(s.overlimits), k.network, k.direction.String(), ns, name)
	}
	for k, full := range unmet {
		ns, name, _ := strings.Cut(full, "/")
		ch <- prometheus.MustNewConstMetric(descUnmet, prometheus.GaugeValue, 1, k.network, k.direction.String(), ns, name)
	}
	ch <- prometheus.MustNewConstMetric(descReconciles, prometheus.CounterValue, float64(e.reconciles[0]), "ok")
	ch <- prometheus.MustNewConstMetric(descReconciles, prometheus.CounterValue, float64(e.reconciles[1]), "error")
	ch <- prometheus.MustNewConstMetric(descShapedInterfaces, prometheus.GaugeValue, float64(e.shapedCount))
}
