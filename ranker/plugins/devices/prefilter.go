package devices

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
)

// PreFilter reads the pod's device requests once per cycle; a pod asking for no devices
// skips DeviceAware's Filter.
func (pl *DeviceAware) PreFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	req := PodRequest(pod)
	s := &cycleState{topologyVersion: pl.nodes.TopologyVersion(), req: req, want: req.Want(), total: req.Total(), picks: &pickMap{m: map[string]annotations.Allocation{}}}
	state.Write(stateKey, s)
	if s.total == 0 {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return nil, nil
}

// PreFilterExtensions returns nil: Filter reads the pods of the NodeInfo it is given.
func (pl *DeviceAware) PreFilterExtensions() fwk.PreFilterExtensions { return nil }
