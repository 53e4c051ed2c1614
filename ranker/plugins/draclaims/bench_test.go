package draclaims_test

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"sextant.io/sextant/ranker/plugins/draclaims"
	"sextant.io/sextant/ranker/plugins/draclaims/dratest"
)

// cluster is the bench-ranker's 8numa-dra shape: nodes of eight accelerators, one per
// NUMA node, in one slice each, and a claim of two allocated on every tenth node.
func cluster(nodes int) *dratest.Manager {
	m := &dratest.Manager{Classes: []*resourceapi.DeviceClass{dratest.Class("acc", sextant)}}
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		var devs []dratest.Device
		for n := range int64(8) {
			devs = append(devs, dratest.Device{Name: fmt.Sprintf("acc-%d", n), NUMANode: &n})
		}
		m.Slices = append(m.Slices, dratest.Slice(sextant, name, devs...))
		if i%10 == 0 {
			m.Claims = append(m.Claims, dratest.Allocated(dratest.Claim("ns", "held-"+name, "acc", 2, false), sextant, name, "acc-0", "acc-1"))
		}
	}
	m.Claims = append(m.Claims, dratest.Claim("ns", "c", "acc", 2, false))
	return m
}

// production is the allocator as the ranker builds it: the features kube-scheduler's
// default feature gates give, and a slice index kept across pods.
func production(m *dratest.Manager) draclaims.Allocator {
	a := allocator(m)
	a.Features = dynamicresources.AllocatorFeatures(feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	a.Slices = &draclaims.SliceIndex{}
	return a
}

// BenchmarkNew is a pod's prediction set up in PreFilter, on 5000 nodes whose slices
// do not change between pods: with the slices' grouping kept from pod to pod, and
// regrouped for each pod (no SliceIndex).
func BenchmarkNew(b *testing.B) {
	m := cluster(5000)
	pod := dratest.Pod("ns", "p", "c")
	for _, kept := range []bool{true, false} {
		a := production(m)
		name := "kept"
		if !kept {
			a.Slices, name = nil, "regrouped"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.New(context.Background(), pod, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDynamicResourcesPreFilter is the baseline: the allocator DynamicResources'
// PreFilter builds for the same pod over the same slices.
func BenchmarkDynamicResourcesPreFilter(b *testing.B) {
	m := cluster(5000)
	a := production(m)
	b.ReportAllocs()
	for b.Loop() {
		st, _ := m.ResourceClaims().GatherAllocatedState()
		all, _ := m.ResourceSlices().ListWithDeviceTaintRules()
		if _, err := structured.NewAllocator(context.Background(), a.Features, *st, m.DeviceClasses(), all, a.CEL); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDevicesOnNode is a pod's prediction on one node, as Filter asks it.
func BenchmarkDevicesOnNode(b *testing.B) {
	m := cluster(5000)
	a := production(m)
	p, err := a.New(context.Background(), dratest.Pod("ns", "p", "c"), nil)
	if err != nil {
		b.Fatal(err)
	}
	n := &v1.Node{}
	n.Name = "node-17"
	b.ReportAllocs()
	for b.Loop() {
		devs, ok, err := p.Devices(context.Background(), n, m.DeviceClassResolver())
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		p.NUMANodes(devs, nil)
	}
}

// BenchmarkDynamicResourcesFilter is the baseline of BenchmarkDevicesOnNode:
// DynamicResources' allocation on one node with the allocator its PreFilter built.
func BenchmarkDynamicResourcesFilter(b *testing.B) {
	m := cluster(5000)
	a := production(m)
	st, _ := m.ResourceClaims().GatherAllocatedState()
	all, _ := m.ResourceSlices().ListWithDeviceTaintRules()
	alloc, err := structured.NewAllocator(context.Background(), a.Features, *st, m.DeviceClasses(), all, a.CEL)
	if err != nil {
		b.Fatal(err)
	}
	claim, _ := m.ResourceClaims().Get("ns", "c")
	n := &v1.Node{}
	n.Name = "node-17"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := alloc.Allocate(context.Background(), n, []*resourceapi.ResourceClaim{claim}); err != nil {
			b.Fatal(err)
		}
	}
}
