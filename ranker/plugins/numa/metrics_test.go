package numa

import (
	"context"
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"sextant.io/sextant/api/annotations"
)

// New must be usable as app.WithPlugin(Name, New).
var _ frameworkruntime.PluginFactory = New

func TestFilterRejectionMetric(t *testing.T) {
	ni := nodeInfo("n")
	pl, _ := newPlugin(t, []*framework.NodeInfo{ni}, uniform("n", 2, 1, gi))
	counter := filterRejections.WithLabelValues(reasonSingleNUMANode)
	before, _ := testutil.GetCounterMetricValue(counter)
	p := pod("p", "2", gi, map[string]string{annotations.NUMAPolicy: "single-numa-node"})
	state := newState()
	pl.PreFilter(context.Background(), state, p, nil)
	if st := pl.Filter(context.Background(), state, p, ni); st.IsSuccess() {
		t.Fatal("Filter passed a pod that fits no single NUMA node")
	}
	after, _ := testutil.GetCounterMetricValue(counter)
	if after != before+1 {
		t.Errorf("rejections went %v -> %v, want +1", before, after)
	}
	// kube-scheduler serves legacyregistry on /metrics: the counter must be there.
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range families {
		if f.GetName() == "sextant_ranker_numa_filter_rejections_total" {
			found = true
		}
	}
	if !found {
		t.Error("sextant_ranker_numa_filter_rejections_total is not in legacyregistry")
	}
}
