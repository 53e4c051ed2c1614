package heartbeat

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Listeners hear of each change after the record holds it: a plugin that brings a pod
// back for a report must find the report in the store.
func TestListenersAfterTheRecord(t *testing.T) {
	s := NewFromObjects()
	var events []string
	s.AddListener(Listener{
		Bandwidth: func(node string, b *Bandwidth) {
			if s.Node(node).Bandwidth() != b {
				t.Errorf("listener for %s ran before the record held its report", node)
			}
			events = append(events, fmt.Sprintf("bandwidth %s %v", node, b != nil))
		},
		Topology: func(node string) {
			events = append(events, fmt.Sprintf("topology %s %v", node, s.Topology(node) != nil))
		},
	})
	s.Put(bw("n"))
	s.Put(topo("n"))
	s.Delete(bw("n"))
	s.Put(&Rejected{TypeMeta: metav1.TypeMeta{Kind: kindTopology}, ObjectMeta: metav1.ObjectMeta{Name: "n"}, Err: errors.New("bad")})
	want := []string{"bandwidth n true", "topology n true", "bandwidth n false", "topology n false"}
	if !slices.Equal(events, want) {
		t.Errorf("events %v, want %v", events, want)
	}
}
