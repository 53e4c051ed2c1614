package enforce

import (
	"net/netip"
	"os"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// sequentialMinors hands out minors from FirstPodMinor in the order asked.
type sequentialMinors map[types.UID]uint16

func (m sequentialMinors) Minor(uid types.UID) uint16 {
	if v, ok := m[uid]; ok {
		return v
	}
	v := FirstPodMinor + uint16(len(m))
	m[uid] = v
	return v
}

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func pod(uid string, bound int, ann map[string]string, addrs ...string) Pod {
	req, err := annotations.ParseBandwidth(ann)
	if err != nil {
		panic(err)
	}
	p := Pod{UID: types.UID(uid), Name: "ns/" + uid, Bound: t0.Add(time.Duration(bound) * time.Second), Request: req}
	for _, a := range addrs {
		p.Addresses = append(p.Addresses, netip.MustParseAddr(a))
	}
	return p
}

func gbit(g float64) [2]float64 { return [2]float64{g * 1e9, g * 1e9} }

func TestMakePlan(t *testing.T) {
	podNet := []Network{{Name: "pod", Interfaces: []Interface{{Name: "eth0", Capacity: gbit(1)}}}}
	const shaped = 950_000_000
	tests := []struct {
		name     string
		networks []Network
		pods     []Pod
		// want: the network's capacity and guaranteed per direction, its egress qdisc
		// on the first interface, and its shortfalls.
		wantCapacity, wantGuaranteed [2]int64
		wantEgress                   QdiscPlan
		wantIngressPods              []Class
		wantShortfalls               []Shortfall
		wantClassified               map[types.UID]uint16
		wantProblem                  string
	}{
		{
			name:     "a guarantee, a limit, and a pod with neither",
			networks: podNet,
			pods: []Pod{
				pod("a", 1, map[string]string{annotations.EgressRequired: "400M"}, "10.0.0.1"),
				pod("b", 2, map[string]string{annotations.KubernetesEgressBandwidth: "100M", annotations.IngressLimit: "50M"}, "10.0.0.2"),
				pod("c", 3, nil, "10.0.0.3"),
			},
			wantCapacity:   [2]int64{902_500_000, 902_500_000},
			wantGuaranteed: [2]int64{0, 400e6},
			wantEgress: QdiscPlan{Rate: shaped,
				Default: Class{Minor: DefaultMinor, Rate: shaped - 400e6 - minClassRate, Ceil: shaped},
				Pods: []Class{
					{Minor: 3, Rate: 400e6, Ceil: shaped, Pod: "a"},
					{Minor: 4, Rate: minClassRate, Ceil: 100e6, Pod: "b"},
				}},
			wantIngressPods: []Class{{Minor: 4, Rate: minClassRate, Ceil: 50e6, Pod: "b"}},
			wantClassified:  map[types.UID]uint16{"a": 3, "b": 4},
		},
		{
			name:     "guarantees kept in bound order; the one past the capacity falls short into the default class, a later smaller one fits",
			networks: podNet,
			pods: []Pod{
				pod("late", 3, map[string]string{annotations.EgressRequired: "500M"}, "10.0.0.3"),
				pod("first", 1, map[string]string{annotations.EgressRequired: "600M"}, "10.0.0.1"),
				pod("small", 4, map[string]string{annotations.EgressRequired: "300M"}, "10.0.0.4"),
			},
			wantCapacity:   [2]int64{902_500_000, 902_500_000},
			wantGuaranteed: [2]int64{0, 900e6},
			wantEgress: QdiscPlan{Rate: shaped,
				Default: Class{Minor: DefaultMinor, Rate: shaped - 900e6, Ceil: shaped},
				Pods: []Class{
					{Minor: 3, Rate: 600e6, Ceil: shaped, Pod: "first"},
					{Minor: 4, Rate: 300e6, Ceil: shaped, Pod: "small"},
				}},
			wantShortfalls: []Shortfall{{Pod: "late", Name: "ns/late", Direction: Egress, Required: 500e6}},
			wantClassified: map[types.UID]uint16{"first": 3, "small": 4},
		},
		{
			name:     "a pod not started holds its guarantee but has no class yet",
			networks: podNet,
			pods: []Pod{
				pod("pending", 1, map[string]string{annotations.IngressRequired: "800M"}),
				pod("running", 2, map[string]string{annotations.IngressRequired: "200M"}, "10.0.0.2"),
			},
			wantCapacity:   [2]int64{902_500_000, 902_500_000},
			wantGuaranteed: [2]int64{800e6, 0},
			wantEgress:     QdiscPlan{Rate: shaped, Default: Class{Minor: DefaultMinor, Rate: shaped, Ceil: shaped}},
			wantShortfalls: []Shortfall{{Pod: "running", Name: "ns/running", Direction: Ingress, Required: 200e6}},
			wantClassified: map[types.UID]uint16{},
		},
		{
			name:     "another network's pods are not this one's",
			networks: podNet,
			pods: []Pod{
				pod("storage", 1, map[string]string{annotations.BandwidthNetwork: "storage", annotations.EgressRequired: "800M"}, "10.0.0.1"),
			},
			wantCapacity:   [2]int64{902_500_000, 902_500_000},
			wantEgress:     QdiscPlan{Rate: shaped, Default: Class{Minor: DefaultMinor, Rate: shaped, Ceil: shaped}},
			wantClassified: map[types.UID]uint16{},
		},
		{
			name: "the smallest interface bounds the guarantees",
			networks: []Network{{Name: "pod", Interfaces: []Interface{
				{Name: "eth0", Capacity: gbit(1)}, {Name: "eth1", Capacity: [2]float64{10e9, 0.5e9}},
			}}},
			wantCapacity:   [2]int64{902_500_000, 451_250_000},
			wantEgress:     QdiscPlan{Rate: shaped, Default: Class{Minor: DefaultMinor, Rate: shaped, Ceil: shaped}},
			wantClassified: map[types.UID]uint16{},
		},
		{
			name:           "a capacity unknown",
			networks:       []Network{{Name: "pod", Interfaces: []Interface{{Name: "veth0", Capacity: [2]float64{1e9, 0}}}}},
			wantProblem:    "the egress capacity of veth0 is unknown (set it with --nic-capacity)",
			wantClassified: map[types.UID]uint16{},
		},
		{
			name:           "no interface",
			networks:       []Network{{Name: "pod"}},
			wantProblem:    "no interface carries the network yet",
			wantClassified: map[types.UID]uint16{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := MakePlan(tc.networks, tc.pods, DefaultShares, sequentialMinors{})
			if len(plan.Networks) != 1 {
				t.Fatalf("%d network plans, want 1", len(plan.Networks))
			}
			np := plan.Networks[0]
			if np.Problem != tc.wantProblem {
				t.Fatalf("problem %q, want %q", np.Problem, tc.wantProblem)
			}
			if !reflect.DeepEqual(plan.Classified, tc.wantClassified) {
				t.Errorf("classified %v, want %v", plan.Classified, tc.wantClassified)
			}
			if tc.wantProblem != "" {
				if np.ProblemReason != v1alpha1.ReasonNoInterfaces && np.ProblemReason != v1alpha1.ReasonNoCapacity {
					t.Errorf("a problem with reason %q", np.ProblemReason)
				}
				if len(np.Interfaces) != 0 {
					t.Errorf("a network with a problem got interfaces: %+v", np.Interfaces)
				}
				return
			}
			if np.Capacity != tc.wantCapacity || np.Guaranteed != tc.wantGuaranteed {
				t.Errorf("capacity %v guaranteed %v, want %v and %v", np.Capacity, np.Guaranteed, tc.wantCapacity, tc.wantGuaranteed)
			}
			if got := np.Interfaces[0].Qdisc[Egress]; !reflect.DeepEqual(got, tc.wantEgress) {
				t.Errorf("egress qdisc\n got %+v\nwant %+v", got, tc.wantEgress)
			}
			if got := np.Interfaces[0].Qdisc[Ingress].Pods; !reflect.DeepEqual(got, tc.wantIngressPods) {
				t.Errorf("ingress classes\n got %+v\nwant %+v", got, tc.wantIngressPods)
			}
			if !reflect.DeepEqual(np.Shortfalls, tc.wantShortfalls) {
				t.Errorf("shortfalls %+v, want %+v", np.Shortfalls, tc.wantShortfalls)
			}
			// HTB keeps only what the children's rates add up to within the root's.
			for _, ifc := range np.Interfaces {
				for _, d := range Directions {
					q := ifc.Qdisc[d]
					sum := q.Default.Rate
					for _, c := range q.Pods {
						sum += c.Rate
					}
					if sum > q.Rate {
						t.Errorf("%s %s: classes add up to %d, over the shaped rate %d", ifc.Name, d, sum, q.Rate)
					}
				}
			}
		})
	}
}

func TestSharesValidate(t *testing.T) {
	for _, s := range []Shares{{0, 0.05}, {1.1, 0.05}, {0.95, 0}, {0.95, 1}} {
		if s.Validate() == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if err := DefaultShares.Validate(); err != nil {
		t.Error(err)
	}
}

// State read after a reboot forgets what it says of the interfaces (the kernel holds
// none of it) and keeps the pods' class minors.
func TestStateAfterReboot(t *testing.T) {
	dir := t.TempDir()
	saved := bootIDFile
	t.Cleanup(func() { bootIDFile = saved })
	bootIDFile = dir + "/boot_id"
	writeBoot := func(id string) {
		if err := os.WriteFile(bootIDFile, []byte(id+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeBoot("boot-1")
	s, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Interfaces["eth0"] = &InterfaceState{Ifindex: 2, Previous: Previous{Qdiscs: []QdiscConfig{{Kind: "tbf", Handle: 7 << 16}}}}
	s.Minor("pod-a")
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	if again, err := LoadState(dir); err != nil || again.Interfaces["eth0"] == nil || again.Minors["pod-a"] != FirstPodMinor {
		t.Fatalf("the same boot: %+v, %v", again, err)
	}
	writeBoot("boot-2")
	after, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Interfaces) != 0 || after.Minors["pod-a"] != FirstPodMinor {
		t.Errorf("after a reboot: interfaces %v, minors %v; want none and pod-a's kept", after.Interfaces, after.Minors)
	}
}
