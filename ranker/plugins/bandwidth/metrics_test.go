package bandwidth

import (
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/ranker/heartbeat"
)

// TestMetricNames pins the exported names: dashboards and alerts query them.
func TestMetricNames(t *testing.T) {
	pl := testPlugin(t, testArgs(nil))
	pod := testPod(map[string]string{annotations.IngressRequired: "1M"})
	pl.Ledger().Reserve(pod, "n", mustParse(t, pod))
	pl.Ledger().Unreserve(pod.UID, "n")
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

// TestStaleReportsCounted: a report older than staleAfter counts, a fresh one does not.
func TestStaleReportsCounted(t *testing.T) {
	now := time.Now()
	store := heartbeat.NewFromObjects()
	store.PutAt(report("fresh", "1G", "1G", now), now.Add(-10*time.Second))
	store.PutAt(report("old", "1G", "1G", now), now.Add(-2*time.Minute))
	store.PutAt(report("older", "1G", "1G", now), now.Add(-time.Hour))
	c := newStaleReports(store, time.Minute, func() time.Time { return now })
	want := `
# HELP sextant_ranker_bandwidth_stale_reports [ALPHA] Nodes whose NodeBandwidth reached the ranker longer than staleAfter ago: they take no pods that require bandwidth.
# TYPE sextant_ranker_bandwidth_stale_reports gauge
sextant_ranker_bandwidth_stale_reports 2
`
	if err := testutil.CustomCollectAndCompare(c, strings.NewReader(want), "sextant_ranker_bandwidth_stale_reports"); err != nil {
		t.Error(err)
	}
}

// TestRejectionReasonsExportedAtZero: every reason docs/operations.md lists is exported
// once the plugin is made, so a rate over it is 0 rather than no data. (Run alone, no
// other test has counted one.)
func TestRejectionReasonsExportedAtZero(t *testing.T) {
	testPlugin(t, testArgs(nil))
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range families {
		if f.GetName() != "sextant_ranker_bandwidth_filter_rejections_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					have[l.GetValue()] = true
				}
			}
		}
	}
	for _, r := range []string{"invalid_annotation", "ledger_not_synced", "no_report", "stale_report", "partial_report",
		"unknown_capacity", "no_network", "insufficient_ingress", "insufficient_egress", "outside_best_fit_window"} {
		if !have[r] {
			t.Errorf("reason %q not exported (have %v)", r, have)
		}
	}
}
