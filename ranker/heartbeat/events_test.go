package heartbeat

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/v1alpha1"
)

func asUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func transform(t *testing.T, resource fwk.EventResource, plural string) cache.TransformFunc {
	t.Helper()
	gvr, fn, ok := EventTransform(resource)
	if !ok || gvr != v1alpha1.GroupVersion.WithResource(plural) {
		t.Fatalf("EventTransform(%s) = %v, %v; want %s", resource, gvr, ok, plural)
	}
	return fn
}

// The NodeBandwidth kube-scheduler keeps for the queueing hint parses as the full
// report does, and keeps neither the per-NIC entries nor metadata beyond identity.
func TestEventTransformBandwidth(t *testing.T) {
	trim := transform(t, BandwidthEvent, "nodebandwidths")
	at := metav1.NewTime(time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC))
	in, eg, c := resource.MustParse("1500M"), resource.MustParse("2G"), resource.MustParse("10G")
	total := v1alpha1.Bandwidth{
		Ingress: v1alpha1.DirectionBandwidth{Capacity: &c, Remaining: &in},
		Egress:  v1alpha1.DirectionBandwidth{Capacity: &c, Remaining: &eg},
	}
	full := &v1alpha1.NodeBandwidth{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeBandwidth"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "u1", ResourceVersion: "42", Labels: map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "sextant-agent"}}},
		Status: v1alpha1.NodeBandwidthStatus{
			SampleTime: &at, Window: &metav1.Duration{Duration: time.Minute}, AgentVersion: "v1",
			Interfaces: []v1alpha1.InterfaceBandwidth{{Name: "eth0", Bandwidth: total}},
			Total:      &total,
		},
	}
	out, err := trim(asUnstructured(t, full))
	if err != nil {
		t.Fatal(err)
	}
	got, ok := out.(*v1alpha1.NodeBandwidth)
	if !ok {
		t.Fatalf("trimmed to %T, want *NodeBandwidth", out)
	}
	if got.Name != "node-1" || got.UID != "u1" || got.ResourceVersion != "42" {
		t.Errorf("identity lost: %+v", got.ObjectMeta)
	}
	if got.Labels != nil || got.ManagedFields != nil || got.Status.Interfaces != nil || got.Status.AgentVersion != "" {
		t.Errorf("kept what no hint reads: %+v", got)
	}
	want, have := *ParseBandwidth(full), *ParseBandwidth(got)
	// Decoding gives the time another *Location; the instant is what counts.
	if !have.SampleTime.Equal(want.SampleTime) {
		t.Errorf("sample time %v, want %v", have.SampleTime, want.SampleTime)
	}
	want.Object, have.Object, want.SampleTime, have.SampleTime = nil, nil, time.Time{}, time.Time{}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("trimmed report parses as %+v, want %+v", have, want)
	}
	if key, err := cache.MetaNamespaceKeyFunc(got); err != nil || key != "node-1" {
		t.Errorf("informer key %q, %v; want node-1", key, err)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "node-1", Obj: got}
	if out, err := trim(tomb); err != nil || out != any(tomb) {
		t.Errorf("a tombstone must pass through: %v, %v", out, err)
	}
	// An error would keep kube-scheduler's informer from ever syncing: a report that
	// does not decode keeps its identity and nothing a hint could act on.
	bad := asUnstructured(t, full)
	bad.Object["status"] = map[string]any{"window": "soon"}
	out, err = trim(bad)
	if err != nil {
		t.Fatalf("a NodeBandwidth that does not decode: %v; want no error", err)
	}
	if got, ok := out.(*v1alpha1.NodeBandwidth); !ok || got.Name != "node-1" || got.ResourceVersion != "42" || got.Status.SampleTime != nil || got.Status.Total != nil {
		t.Errorf("a NodeBandwidth that does not decode trimmed to %#v, want its identity only", out)
	}
}

func TestEventTransformTopology(t *testing.T) {
	trim := transform(t, TopologyEvent, "nodetopologies")
	full := &v1alpha1.NodeTopology{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeTopology"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "u1", ResourceVersion: "7"},
		Status:     v1alpha1.NodeTopologyStatus{Topology: v1alpha1.Topology{NUMANodes: []v1alpha1.NUMANode{{ID: 0}, {ID: 1}}}},
	}
	out, err := trim(asUnstructured(t, full))
	if err != nil {
		t.Fatal(err)
	}
	got, ok := out.(*v1alpha1.NodeTopology)
	if !ok {
		t.Fatalf("trimmed to %T, want *NodeTopology", out)
	}
	if got.Name != "node-1" || got.UID != "u1" || got.ResourceVersion != "7" || got.Kind != "NodeTopology" {
		t.Errorf("identity lost: %+v", got)
	}
	if got.Status.NUMANodes != nil {
		t.Errorf("kept the NUMA nodes, which no hint reads: %+v", got.Status)
	}
}

func TestEventTransformOther(t *testing.T) {
	if _, fn, ok := EventTransform(fwk.Node); ok || fn != nil {
		t.Error("only the heartbeat kinds are trimmed")
	}
}
