package bandwidth

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// networks sets a report's status.networks: name -> remaining (both directions) and
// capacity. The total stays as report made it: no component may read it once a report
// has networks.
func networks(nbw *v1alpha1.NodeBandwidth, nets ...struct{ name, remaining, capacity string }) *v1alpha1.NodeBandwidth {
	for _, n := range nets {
		c, r := resource.MustParse(n.capacity), resource.MustParse(n.remaining)
		dir := v1alpha1.DirectionBandwidth{Capacity: &c, Remaining: &r}
		nbw.Status.Networks = append(nbw.Status.Networks, v1alpha1.NetworkBandwidth{
			Name: n.name, Interfaces: []string{"eth-" + n.name}, Bandwidth: v1alpha1.Bandwidth{Ingress: dir, Egress: dir},
		})
	}
	return nbw
}

type net3 = struct{ name, remaining, capacity string }

// TestFilterByNetwork: a pod is filtered and scored on the network it names, never on
// the total. The total of every report here is 9G, roomy enough for any pod below: a
// filter that read it would pass them all.
func TestFilterByNetwork(t *testing.T) {
	fresh := now.Add(-5 * time.Second)
	reports := []*v1alpha1.NodeBandwidth{
		// Two unbonded 10G NICs in the pod network: the agent publishes the larger
		// single NIC's remaining (8G), not their sum.
		networks(report("two-nics", "9G", "9G", fresh), net3{"pod", "8G", "20G"}),
		// A 2x10G bond: one interface with the bond's capacity.
		networks(report("bond", "9G", "9G", fresh), net3{"pod", "18G", "20G"}),
		// A busy storage network beside an idle pod network, and the reverse.
		networks(report("storage-busy", "9G", "9G", fresh), net3{"pod", "9G", "10G"}, net3{"storage", "100M", "25G"}),
		networks(report("pod-busy", "9G", "9G", fresh), net3{"pod", "100M", "10G"}, net3{"storage", "20G", "25G"}),
		// An agent older than networks: its total (9G) is its pod network.
		report("legacy", "9G", "9G", fresh),
	}
	pl := testPlugin(t, testArgs(nil), reports...)
	nodes := []string{"two-nics", "bond", "storage-busy", "pod-busy", "legacy"}
	for _, tc := range []struct {
		name         string
		annotations  map[string]string
		wantFiltered map[string]string // node -> reason
	}{
		{"12G on the pod network", map[string]string{annotations.IngressRequired: "12G"},
			map[string]string{"two-nics": reasonIngress, "storage-busy": reasonIngress, "pod-busy": reasonIngress, "legacy": reasonIngress}},
		{"1G on the pod network: storage traffic does not count", map[string]string{annotations.EgressRequired: "1G"},
			map[string]string{"pod-busy": reasonEgress}},
		{"1G on storage: pod traffic does not count", map[string]string{annotations.IngressRequired: "1G", annotations.BandwidthNetwork: "storage"},
			map[string]string{"two-nics": reasonNoNetwork, "bond": reasonNoNetwork, "legacy": reasonNoNetwork, "storage-busy": reasonIngress}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPod(tc.annotations)
			c := schedule(t, pl, p, nodes, false)
			if len(c.filtered) != len(tc.wantFiltered) {
				t.Errorf("filtered %v, want %v", c.filtered, tc.wantFiltered)
			}
			req, _ := annotations.ParseBandwidth(tc.annotations)
			for node, reason := range tc.wantFiltered {
				st := c.filtered[node]
				if st == nil {
					t.Errorf("%s passed, want %s", node, reason)
					continue
				}
				if want := pl.message(reason, req.Network); st.Message() != want {
					t.Errorf("%s: %q, want %q", node, st.Message(), want)
				}
			}
		})
	}
	if d := checkDetail(pl, testPod(map[string]string{annotations.IngressRequired: "1G", annotations.BandwidthNetwork: "storage"}), "bond"); d != `node has no network "storage"` {
		t.Errorf("detail %q", d)
	}
	if got := pl.message(reasonNoNetwork, "storage"); got != `node(s) had no network "storage" (bandwidth.sextant.io/network)` {
		t.Errorf("message %q", got)
	}
}

// TestFilterByNamedNetworkAlone: a pod that names its network is kept off nodes
// without it even when it requires no rate; whether a node has a network is not a
// measurement, so a stale report still says it. A pod that names none is not filtered.
func TestFilterByNamedNetworkAlone(t *testing.T) {
	fresh, old := now.Add(-5*time.Second), now.Add(-time.Hour)
	pl := testPlugin(t, testArgs(nil),
		networks(report("storage", "9G", "9G", fresh), net3{"pod", "9G", "10G"}, net3{"storage", "100M", "25G"}),
		networks(report("storage-stale", "9G", "9G", old), net3{"pod", "9G", "10G"}, net3{"storage", "20G", "25G"}),
		networks(report("pod-only", "9G", "9G", fresh), net3{"pod", "9G", "10G"}),
		report("legacy", "9G", "9G", fresh), // its total is its pod network
	)
	nodes := []string{"storage", "storage-stale", "pod-only", "legacy", "silent"}
	onStorage := map[string]string{"pod-only": reasonNoNetwork, "legacy": reasonNoNetwork, "silent": reasonNoReport}
	for _, tc := range []struct {
		name         string
		annotations  map[string]string
		wantFiltered map[string]string // node -> reason
	}{
		{"storage named, no rate", map[string]string{annotations.BandwidthNetwork: "storage"}, onStorage},
		{"storage named, expected only", map[string]string{annotations.BandwidthNetwork: "storage", annotations.IngressExpected: "1G"}, onStorage},
		{"pod named, no rate", map[string]string{annotations.BandwidthNetwork: "pod"}, map[string]string{"silent": reasonNoReport}},
		{"no network named, expected only", map[string]string{annotations.IngressExpected: "1G"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := schedule(t, pl, testPod(tc.annotations), nodes, false)
			if !c.preFilter.IsSuccess() && !c.preFilter.IsSkip() {
				t.Fatalf("PreFilter %v", c.preFilter)
			}
			if got := len(c.filtered); got != len(tc.wantFiltered) {
				t.Errorf("filtered %v, want %v", c.filtered, tc.wantFiltered)
			}
			for node, reason := range tc.wantFiltered {
				st := c.filtered[node]
				if st == nil {
					t.Errorf("%s passed, want %s", node, reason)
					continue
				}
				if st.Code() != fwk.UnschedulableAndUnresolvable || st.Message() != pl.message(reason, tc.annotations[annotations.BandwidthNetwork]) {
					t.Errorf("%s: %v, want %q", node, st, pl.message(reason, tc.annotations[annotations.BandwidthNetwork]))
				}
			}
		})
	}
	if d := checkDetail(pl, testPod(map[string]string{annotations.BandwidthNetwork: "storage"}), "legacy"); d != `node has no network "storage"` {
		t.Errorf("detail %q", d)
	}
}

// TestScoreByNetwork: most-headroom on storage ranks by the storage network's
// remaining, whatever the pod network has.
func TestScoreByNetwork(t *testing.T) {
	fresh := now.Add(-5 * time.Second)
	pl := testPlugin(t, testArgs(func(a *Args) { a.Strategy = annotations.MostHeadroom }),
		networks(report("a", "9G", "9G", fresh), net3{"pod", "9G", "10G"}, net3{"storage", "2G", "25G"}),
		networks(report("b", "9G", "9G", fresh), net3{"pod", "1G", "10G"}, net3{"storage", "20G", "25G"}),
	)
	c := schedule(t, pl, testPod(map[string]string{annotations.IngressRequired: "1G", annotations.BandwidthNetwork: "storage"}), []string{"a", "b"}, false)
	if c.chosen != "b" {
		t.Errorf("chosen %s (scores %v), want b: the roomier storage network", c.chosen, c.scores)
	}
	c = schedule(t, pl, testPod(map[string]string{annotations.IngressRequired: "1G"}), []string{"a", "b"}, false)
	if c.chosen != "a" {
		t.Errorf("chosen %s (scores %v), want a: the roomier pod network", c.chosen, c.scores)
	}
}

// TestLedgerPerNetwork: a reservation counts on its own network of its node only.
func TestLedgerPerNetwork(t *testing.T) {
	fresh := now.Add(-5 * time.Second)
	pl := testPlugin(t, testArgs(nil), networks(report("n", "9G", "9G", fresh), net3{"pod", "9G", "10G"}, net3{"storage", "9G", "25G"}))
	onStorage := testPod(map[string]string{annotations.IngressRequired: "3G", annotations.BandwidthNetwork: "storage"})
	onPod := testPod(map[string]string{annotations.EgressRequired: "1G"})
	pl.Ledger().Reserve(onStorage, "n", mustParse(t, onStorage))
	pl.Ledger().Reserve(onPod, "n", mustParse(t, onPod))
	for _, tc := range []struct {
		network             string
		wantIngress, wantEg int64
	}{{"storage", 3e9, 0}, {"pod", 0, 1e9}, {"backup", 0, 0}} {
		if in, eg := pl.Ledger().ReservedOn("n", tc.network); in != tc.wantIngress || eg != tc.wantEg {
			t.Errorf("%s: reserved %d/%d, want %d/%d", tc.network, in, eg, tc.wantIngress, tc.wantEg)
		}
	}
	// A second storage pod of 7G no longer fits storage (9G - 3G), and still fits pod.
	big := map[string]string{annotations.IngressRequired: "7G", annotations.BandwidthNetwork: "storage"}
	if c := schedule(t, pl, testPod(big), []string{"n"}, false); c.filtered["n"] == nil {
		t.Error("7G on storage passed with 3G of its 9G reserved")
	}
	delete(big, annotations.BandwidthNetwork)
	if c := schedule(t, pl, testPod(big), []string{"n"}, false); c.filtered["n"] != nil {
		t.Errorf("7G on the pod network filtered: %v", c.filtered["n"])
	}
	pl.Ledger().Unreserve(onStorage.UID, "n")
	if in, _ := pl.Ledger().ReservedOn("n", "storage"); in != 0 {
		t.Errorf("storage reserved %d after Unreserve, want 0", in)
	}
	if _, eg := pl.Ledger().ReservedOn("n", "pod"); eg != 1e9 {
		t.Errorf("pod reserved %d after the storage pod's Unreserve, want 1G", eg)
	}
}
