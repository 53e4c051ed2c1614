// Package nodelookup is how sextant's scheduler plugins find a node's heartbeat record
// and the scheduler's snapshot of a node. BandwidthAware, NUMAAware and DeviceAware take
// the same two lookups, so that one store and one snapshot lister serve them all.
package nodelookup

import (
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/ranker/heartbeat"
)

// Nodes gives a node's heartbeat record, nil when it has none: what the plugins read
// reports and topologies from. *heartbeat.Store implements it.
type Nodes interface {
	Node(name string) *heartbeat.Node
	// NodeOf is Node(node.Name), cheaper for the Node objects of a scheduling cycle.
	NodeOf(node *v1.Node) *heartbeat.Node
	// TopologyVersion changes whenever a node's NodeTopology changes.
	TopologyVersion() uint64
}

var _ Nodes = (*heartbeat.Store)(nil)

// NodeInfos looks up the scheduler's snapshot of a node; Reserve uses it when Filter
// and Score did not run for the selected node in this cycle (a single feasible node, or
// a node hint from opportunistic batching).
type NodeInfos func(node string) (fwk.NodeInfo, error)

// Snapshot looks nodes up in the snapshot of the profile whose handle is h, the one the
// scheduler takes at the start of each cycle.
func Snapshot(h fwk.Handle) NodeInfos {
	return func(node string) (fwk.NodeInfo, error) {
		return h.SnapshotSharedLister().NodeInfos().Get(node)
	}
}
