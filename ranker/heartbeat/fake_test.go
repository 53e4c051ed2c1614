package heartbeat

import (
	"testing"
)

func TestNewFromObjects(t *testing.T) {
	s := NewFromObjects(bw("node-1"), topo("node-2"))
	if s.Bandwidth("node-1") == nil || s.Bandwidth("node-2") != nil {
		t.Error("bandwidth lookup wrong")
	}
	if s.Topology("node-2") == nil || s.Topology("node-1") != nil {
		t.Error("topology lookup wrong")
	}
	if s.Node("node-3") != nil || s.Bandwidth("node-3") != nil || s.Topology("node-3") != nil {
		t.Error("a node without heartbeat objects has a record")
	}
}
