package bandwidth

import (
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"

	"sextant.io/sextant/api/annotations"
)

// TestMetricNames pins the exported names: dashboards and alerts query them.
func TestMetricNames(t *testing.T) {
	pl := testPlugin(t, testArgs(nil))
	pod := testPod(map[string]string{annotations.IngressRequired: "1M"})
	pl.Ledger().Reserve(pod, "n", mustParse(t, pod))
	pl.Ledger().Unreserve(pod.UID)
	filterRejections.WithLabelValues(reasonNoReport).Add(0)

	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range families {
		have[f.GetName()] = true
	}
	for _, name := range []string{
		"sextant_ranker_bandwidth_filter_rejections_total",
		"sextant_ranker_bandwidth_reservations",
		"sextant_ranker_bandwidth_reserved_bytes_per_second",
		"sextant_ranker_bandwidth_reservations_total",
		"sextant_ranker_bandwidth_reservation_releases_total",
	} {
		if !have[name] {
			t.Errorf("metric %s not exported", name)
		}
	}
}
