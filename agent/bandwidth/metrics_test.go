package bandwidth

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestCollectorExportsBaseUnits(t *testing.T) {
	links := []Link{
		{Name: "eth0", Index: 2, Up: true, Physical: true, SpeedMbps: 1000},
		{Name: "eth1", Index: 3, Up: true, Physical: true}, // capacity unknown
	}
	m, src, _, _, clk := newTestMeter(Config{}, links)
	m.Rescan()
	m.Sample()
	clk.Step(time.Second)
	src.counters[2] = Counters{Ingress: Count{Bytes: 1_000_000, Packets: 1000}, Egress: Count{Bytes: 500, Packets: 5}}
	src.counters[3] = Counters{Egress: Count{Bytes: 2000, Packets: 2}}
	m.Sample()

	got := collect(t, m)
	want := map[string]float64{
		"sextant_nic_bytes_total{eth0,ingress}":                1_000_000,
		"sextant_nic_packets_total{eth0,ingress}":              1000,
		"sextant_nic_bytes_total{eth0,egress}":                 500,
		"sextant_nic_rate_bytes_per_second{eth0,ingress}":      1_000_000,
		"sextant_nic_peak_bytes_per_second{eth0,ingress}":      1_000_000,
		"sextant_nic_capacity_bytes_per_second{eth0,ingress}":  125_000_000,
		"sextant_nic_remaining_bytes_per_second{eth0,ingress}": 124_000_000,
		"sextant_nic_remaining_bytes_per_second{eth0,egress}":  125_000_000 - 500,
		"sextant_nic_bytes_total{eth1,egress}":                 2000,
		"sextant_nic_rate_bytes_per_second{eth1,egress}":       2000,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	for _, absent := range []string{"sextant_nic_capacity_bytes_per_second{eth1,egress}", "sextant_nic_remaining_bytes_per_second{eth1,ingress}"} {
		if _, ok := got[absent]; ok {
			t.Errorf("%s is exported, want it absent while the capacity is unknown", absent)
		}
	}
}

// collect gathers the meter's collector: metric name and {interface or network,
// direction} -> value.
func collect(t *testing.T, m *Meter) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(m))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			key := f.GetName() + labels(mt)
			switch {
			case mt.Counter != nil:
				got[key] = mt.GetCounter().GetValue()
			case mt.Gauge != nil:
				got[key] = mt.GetGauge().GetValue()
			}
		}
	}
	return got
}

func labels(m *dto.Metric) string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return "{" + l["interface"] + l["network"] + "," + l["direction"] + "}"
}

// TestCollectorExportsNetworks: each network's figures under a network label, the pod
// network found by the default route, storage named by flag.
func TestCollectorExportsNetworks(t *testing.T) {
	links := []Link{
		{Name: "eth0", Index: 2, Up: true, Physical: true, SpeedMbps: 1000, DefaultRoute: true},
		{Name: "eth1", Index: 3, Up: true, Physical: true, SpeedMbps: 1000},
		{Name: "eth2", Index: 4, Up: true, Physical: true, SpeedMbps: 1000},
	}
	m, src, _, _, clk := newTestMeter(Config{Networks: []NetworkSpec{{"storage", []string{"eth1", "eth2"}}}}, links)
	m.Rescan()
	m.Sample()
	clk.Step(time.Second)
	src.counters[2] = Counters{Ingress: Count{Bytes: 1_000_000}}
	src.counters[3] = Counters{Ingress: Count{Bytes: 25_000_000}}
	src.counters[4] = Counters{Ingress: Count{Bytes: 5_000_000}}
	m.Sample()

	got := collect(t, m)
	for k, v := range map[string]float64{
		"sextant_network_remaining_bytes_per_second{pod,ingress}":     124_000_000,
		"sextant_network_capacity_bytes_per_second{storage,ingress}":  250_000_000,
		"sextant_network_rate_bytes_per_second{storage,ingress}":      30_000_000,
		"sextant_network_peak_bytes_per_second{storage,ingress}":      30_000_000,
		"sextant_network_remaining_bytes_per_second{storage,ingress}": 120_000_000, // eth2's: the larger of one NIC
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

// TestCollectorExportsAttachment: the attached count and the failed attachments, which
// the chart's SextantMeterNotAttached alert reads.
func TestCollectorExportsAttachment(t *testing.T) {
	links := []Link{
		{Name: "eth0", Index: 2, Up: true, Physical: true, SpeedMbps: 1000},
		{Name: "eth1", Index: 3, Up: true, Physical: true, SpeedMbps: 1000},
	}
	m, _, _, att, _ := newTestMeter(Config{}, links)
	att.fail[3] = true
	m.Rescan()
	m.Rescan()
	got := collect(t, m)
	for k, v := range map[string]float64{
		"sextant_meter_attached_interfaces{,}":   1,
		"sextant_meter_attach_failures_total{,}": 2,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}
