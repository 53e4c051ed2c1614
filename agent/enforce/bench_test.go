//go:build linux

package enforce

import (
	"fmt"
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/api/annotations"
)

// BenchmarkPodClasses is what a pod's start and end cost the node with 200 pods already
// classified on one shaped interface: the plan, the classifier's maps, and the classes
// of both qdiscs, as a reconcile does them (make bench-enforce reports it).
func BenchmarkPodClasses(b *testing.B) {
	_, path := shaperNetns(b)
	s := newShaper(b, path, b.TempDir())
	networks := []Network{{Name: annotations.PodNetwork, Interfaces: []Interface{{Name: "up0", Capacity: gbit(10)}}}}
	pods := benchPods(201)
	apply := func(pods []Pod) {
		plan := MakePlan(networks, pods, DefaultShares, s.State())
		if err := s.Classify(pods, plan.Classified); err != nil {
			b.Fatal(err)
		}
		if err := s.Shape(plan.Networks[0].Interfaces[0]); err != nil {
			b.Fatal(err)
		}
		s.State().ReleaseMinors(plan.Classified)
	}
	apply(pods[:200])
	b.Run("start", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			apply(pods[:200])
			b.StartTimer()
			apply(pods)
		}
	})
	b.Run("end", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			apply(pods)
			b.StartTimer()
			apply(pods[:200])
		}
	})
}

// benchPods are n running pods each requiring 1M both ways, with addresses 10.1.x.y.
func benchPods(n int) []Pod {
	req, err := annotations.ParseBandwidth(map[string]string{annotations.IngressRequired: "1M", annotations.EgressRequired: "1M"})
	if err != nil {
		panic(err)
	}
	pods := make([]Pod, n)
	for i := range pods {
		pods[i] = Pod{UID: types.UID(fmt.Sprintf("pod-%d", i)), Name: fmt.Sprintf("ns/pod-%d", i), Bound: t0.Add(-1),
			Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})}, Request: req}
	}
	pods[n-1].Bound = t0 // the one that comes and goes is bound last
	return pods
}
