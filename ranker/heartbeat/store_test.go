package heartbeat

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sextant.io/sextant/api/v1alpha1"
)

func TestNewFromObjects(t *testing.T) {
	s := NewFromObjects(
		&v1alpha1.NodeBandwidth{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		&v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}},
	)
	if s.Bandwidth("node-1") == nil || s.Bandwidth("node-2") != nil {
		t.Error("bandwidth lookup wrong")
	}
	if s.Topology("node-2") == nil || s.Topology("node-1") != nil {
		t.Error("topology lookup wrong")
	}
}
