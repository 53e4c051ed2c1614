package heartbeat

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/v1alpha1"
)

// The heartbeat kinds as cluster events, in the <plural>.<version>.<group> form that
// makes kube-scheduler watch them with a dynamic informer of its own to run the plugins'
// queueing hints.
const (
	BandwidthEvent fwk.EventResource = "nodebandwidths.v1alpha1.sextant.io"
	TopologyEvent  fwk.EventResource = "nodetopologies.v1alpha1.sextant.io"
)

// EventTransform returns the resource behind a heartbeat event and the transform that
// keeps, in kube-scheduler's informer of it, only what the queueing hints read; ok is
// false for any other event resource.
//
// Why: that informer keeps every object as an Unstructured, a tree of maps and
// interfaces. At 5000 nodes the NodeBandwidths and NodeTopologies took 162 MB of the
// ranker's 275 MB heap, three times what the rest of kube-scheduler held, and the
// garbage collector scanned them on every cycle
// (docs/design/0004-trim-kube-schedulers-heartbeat-copies.md). The hints need a
// report's sample time and totals (BandwidthAware) and nothing of a NodeTopology but
// that it changed (NUMAAware and DeviceAware queue on any change); the plugins read
// the objects themselves from the Store.
func EventTransform(resource fwk.EventResource) (schema.GroupVersionResource, cache.TransformFunc, bool) {
	switch resource {
	case BandwidthEvent:
		return v1alpha1.GroupVersion.WithResource("nodebandwidths"), trimBandwidth, true
	case TopologyEvent:
		return v1alpha1.GroupVersion.WithResource("nodetopologies"), trimTopology, true
	}
	return schema.GroupVersionResource{}, nil, false
}

// trimBandwidth keeps a NodeBandwidth's identity and the status fields ParseBandwidth
// reads, typed. An object the Store rejects (DecodeBandwidth) keeps its identity only:
// no sample, no window, so no hint finds it makes a pod schedulable. It is never an
// error, which would stop kube-scheduler's informer from syncing (the Store logs and
// counts the rejection).
func trimBandwidth(in any) (any, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return in, nil // tombstones and objects already trimmed pass through
	}
	full, err := DecodeBandwidth(u)
	if err != nil {
		return &v1alpha1.NodeBandwidth{
			TypeMeta:   metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()},
			ObjectMeta: identity(u),
		}, nil
	}
	return &v1alpha1.NodeBandwidth{
		TypeMeta:   full.TypeMeta,
		ObjectMeta: identity(u),
		Status: v1alpha1.NodeBandwidthStatus{
			SampleTime: full.Status.SampleTime,
			Window:     full.Status.Window,
			Total:      full.Status.Total,
			Networks:   trimNetworks(full.Status.Networks),
		},
	}, nil
}

// trimNetworks keeps each network's name and remaining, what the hints read.
func trimNetworks(in []v1alpha1.NetworkBandwidth) []v1alpha1.NetworkBandwidth {
	if in == nil {
		return nil
	}
	out := make([]v1alpha1.NetworkBandwidth, len(in))
	for i := range in {
		out[i].Name = in[i].Name
		out[i].Ingress.Remaining = in[i].Ingress.Remaining
		out[i].Egress.Remaining = in[i].Egress.Remaining
		// remaining needs a capacity to be read as known (ParseBandwidth).
		out[i].Ingress.Capacity = in[i].Ingress.Capacity
		out[i].Egress.Capacity = in[i].Egress.Capacity
	}
	return out
}

// trimTopology keeps a NodeTopology's identity only.
func trimTopology(in any) (any, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return in, nil
	}
	return &v1alpha1.NodeTopology{
		TypeMeta:   metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()},
		ObjectMeta: identity(u),
	}, nil
}
