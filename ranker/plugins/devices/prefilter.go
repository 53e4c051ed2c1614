package devices

import (
	"context"
	"fmt"
	"maps"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// PreFilter reads the pod's device requests once per cycle; a pod asking for no devices
// skips DeviceAware's Filter.
func (pl *DeviceAware) PreFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	req := PodRequest(pod)
	s := &cycleState{topologyVersion: pl.nodes.TopologyVersion(), req: req, want: req.Want(), total: req.Total(), picks: &pickMap{m: map[string]annotations.Allocation{}}}
	if pl.resolver != nil {
		for _, w := range s.want {
			if pl.resolver.GetDeviceClass(Kinds[w.Kind].ResourceName()) != nil {
				s.resolver = pl.resolver
				break
			}
		}
	}
	state.Write(stateKey, s)
	if s.total == 0 {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return nil, nil
}

// PreFilterExtensions returns the plugin: Filter reads the pods of the NodeInfo it is
// given, but not the holders the agent publishes on the NodeTopology, which still name
// the victims preemption's dry run took off a copy of the NodeInfo. AddPod and RemovePod
// record those pods in the state so that Filter can tell.
func (pl *DeviceAware) PreFilterExtensions() fwk.PreFilterExtensions { return pl }

// AddPod records that the framework put podInfoToAdd on a copy of the node: a victim
// preemption spares, or a nominated pod.
func (pl *DeviceAware) AddPod(_ context.Context, state fwk.CycleState, _ *v1.Pod, podInfoToAdd fwk.PodInfo, _ fwk.NodeInfo) *fwk.Status {
	return simulate(state, func(sim *simulation) { sim.add(podInfoToAdd.GetPod()) })
}

// RemovePod records that the framework took podInfoToRemove off a copy of the node: a
// victim in preemption's dry run.
func (pl *DeviceAware) RemovePod(_ context.Context, state fwk.CycleState, _ *v1.Pod, podInfoToRemove fwk.PodInfo, _ fwk.NodeInfo) *fwk.Status {
	return simulate(state, func(sim *simulation) { sim.remove(podInfoToRemove.GetPod()) })
}

// simulate applies change to the state's simulation, starting one on a copy of the
// state's entry when there is none: that entry may be shared with the state this one
// was cloned from, and with every other node's copy.
func simulate(state fwk.CycleState, change func(*simulation)) *fwk.Status {
	s, ok := readState(state)
	if !ok {
		return fwk.AsStatus(fmt.Errorf("device plugin: simulate a pod change: no state from PreFilter under %q", stateKey))
	}
	if s.total == 0 {
		return nil
	}
	if s.sim == nil {
		c := *s
		c.sim = &simulation{}
		s = &c
		state.Write(stateKey, s)
	}
	change(s.sim)
	return nil
}

// simulation is what the framework changed on a copy of a node's NodeInfo, as the
// PreFilter extensions were told: preemption's dry run takes victims off and adds back
// those it spares, and Filter adds the node's nominated pods. The copy's pods carry
// their annotations already; what it lacks is that the holders the agent published
// (the kubelet's PodResources) for a pod taken off no longer hold anything.
type simulation struct {
	// removed are the pods taken off, by UID; added, the pods put on since.
	removed map[types.UID]types.NamespacedName
	added   map[types.UID]*v1.Pod
}

func (sim *simulation) remove(pod *v1.Pod) {
	delete(sim.added, pod.UID)
	if sim.removed == nil {
		sim.removed = map[types.UID]types.NamespacedName{}
	}
	sim.removed[pod.UID] = types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
}

func (sim *simulation) add(pod *v1.Pod) {
	delete(sim.removed, pod.UID)
	if sim.added == nil {
		sim.added = map[types.UID]*v1.Pod{}
	}
	sim.added[pod.UID] = pod
}

func (sim *simulation) clone() *simulation {
	return &simulation{removed: maps.Clone(sim.removed), added: maps.Clone(sim.added)}
}

// releases reports whether h names a pod the simulation took off the node: by UID, or
// by namespace and name when the agent published none (it had not seen the pod yet).
// False for a nil simulation.
func (sim *simulation) releases(h *v1alpha1.DeviceHolder) bool {
	if sim == nil {
		return false
	}
	if h.UID != "" {
		_, ok := sim.removed[h.UID]
		return ok
	}
	for _, nn := range sim.removed {
		if nn.Namespace == h.Namespace && nn.Name == h.Name {
			return true
		}
	}
	return false
}
