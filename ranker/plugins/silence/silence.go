// Package silence is the rule DeviceAware and NUMAAware share for a node whose agent
// has gone quiet: neither places on what a gone agent last published, since what it
// published is carried out by that agent (its device plugin hands out the devices, its
// NUMA pinning narrows the cpusets).
//
// An agent writes its NodeBandwidth at least every --report-max-interval (30s) so that
// silence means a dead agent; its NodeTopology is rewritten only on a change or every
// --topology-resync (10m), so its age says nothing. Silence is therefore judged by the
// node's NodeBandwidth alone, by when it reached the ranker on the ranker's clock
// (heartbeat.Bandwidth.Received), never by the time the node wrote into it.
package silence

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/ranker/heartbeat"
)

// After is how long after the node's last NodeBandwidth reached the ranker its agent
// counts as gone: four of the agent's 30s heartbeats, so that a write or two lost to an
// API-server hiccup does not count.
const After = 2 * time.Minute

// Reason is the value of a plugin's filter-rejection reason label for a silent node.
const Reason = "silent_agent"

// Silent reports whether b, a node's NodeBandwidth, is missing or reached the ranker
// more than After before now.
func Silent(b *heartbeat.Bandwidth, now time.Time) bool {
	return b == nil || b.Received.IsZero() || now.Sub(b.Received) > After
}

// Nodes are the nodes one plugin rejected as silent and has not heard from since, so
// that only the first fresh report after a silence wakes the plugin's waiting pods, not
// each of the thousands of reports a minute that change nothing for them.
type Nodes struct{ m sync.Map }

// Rejected records that the plugin rejected node as silent. LoadOrStore, not Store:
// when every agent is silent (an API-server outage) each Filter call gets here, and a
// load of a present key takes no lock.
func (n *Nodes) Rejected(node string) { n.m.LoadOrStore(node, struct{}{}) }

// Heard reports whether report, node's new NodeBandwidth, ends a silence the plugin
// rejected pods for: it is fresh at now and the node was recorded by Rejected. A stale
// report (one the ranker lists at start, written long ago) leaves the node silent.
func (n *Nodes) Heard(node string, report *heartbeat.Bandwidth, now time.Time) bool {
	if Silent(report, now) {
		return false
	}
	_, was := n.m.LoadAndDelete(node)
	return was
}

// HeardDuring reports whether a node that plugin rejected with message msg (its
// silence message) is heard from now: its report arrived after Filter read the record,
// maybe before the pod was waiting for it, and then the listener's wake-up missed the
// pod. silent says whether a node's agent is silent now.
func HeardDuring(statuses fwk.NodeToStatusReader, nodes []fwk.NodeInfo, plugin, msg string, silent func(*v1.Node) bool) bool {
	for _, ni := range nodes {
		node := ni.Node()
		if node == nil {
			continue
		}
		st := statuses.Get(node.Name)
		if st == nil || st.Plugin() != plugin || st.Message() != msg {
			continue
		}
		if !silent(node) {
			return true
		}
	}
	return false
}
