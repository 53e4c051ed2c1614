package numapin

import (
	"context"
	"errors"
	"time"

	"sextant.io/sextant/api/v1alpha1"
)

// KubeletPinning says which of the kubelet's resource managers set containers' cpusets
// themselves: the CPU manager under its static policy (cpuset.cpus), the memory manager
// under its Static policy (cpuset.mems).
type KubeletPinning struct{ StaticCPU, StaticMemory bool }

// KubeletPolicies asks the kubelet which of its managers pin (PodResources).
type KubeletPolicies func(ctx context.Context) (KubeletPinning, error)

// policyRetry is how soon the kubelet is asked again for its CPU and memory manager
// policies while it has not answered.
const policyRetry = 2 * time.Second

// pendingLimit is how long the kubelet may take to answer before the node stops
// counting as one that pins: the ranker places pods on a Pending node as if it pinned
// them, which holds only if the answer comes soon.
const pendingLimit = 30 * time.Second

// errPolicyUnknown holds every pod back until the kubelet answers: not a failure of the
// pod's.
var errPolicyUnknown = errors.New("the kubelet has not said whether it runs a static CPU or memory manager policy (PodResources); the pod is pinned once it has")

// gate says whether the kubelet leaves pods' cpusets to this process now:
// errPolicyUnknown until it has said whether it runs a static policy, the refusal that
// holds for every pod under either static policy, neither when it leaves them.
func (p *Pinner) gate() (*refusal, error) {
	switch {
	case !p.policyKnown.Load():
		return nil, errPolicyUnknown
	case p.staticCPU.Load():
		return &refusal{reasonStaticCPUManager,
			"the kubelet runs the static CPU manager policy, which sets cpusets itself; sextant leaves this pod's CPUs to it"}, nil
	case p.staticMemory.Load():
		return &refusal{reasonStaticMemManager,
			"the kubelet runs the Static memory manager policy, which sets memory nodes itself; sextant leaves this pod to it"}, nil
	}
	return nil, nil
}

// State is whether the Pinner carries out the ranker's NUMA decisions now, as the
// node's NodeTopology publishes it: Pending until the kubelet has said whether it runs
// a static policy (Unknown once that has taken longer than pendingLimit), then
// KubeletStaticCPUManager, KubeletStaticMemoryManager or Active.
func (p *Pinner) State() v1alpha1.NUMAPinning {
	switch {
	case !p.policyKnown.Load() && p.now().Sub(p.started) > pendingLimit:
		return v1alpha1.PinningUnknown
	case !p.policyKnown.Load():
		return v1alpha1.PinningPending
	case p.staticCPU.Load():
		return v1alpha1.PinningKubeletStaticCPUManager
	case p.staticMemory.Load():
		return v1alpha1.PinningKubeletStaticMemoryManager
	default:
		return v1alpha1.PinningActive
	}
}

// checkStaticPolicy asks the kubelet whether it runs a static CPU or memory manager
// policy, keeping its last answer when it does not answer.
func (p *Pinner) checkStaticPolicy(ctx context.Context) {
	if p.static == nil {
		p.policyKnown.Store(true)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.RuntimeTimeout)
	policies, err := p.static(cctx)
	cancel()
	if err != nil {
		if p.policyKnown.Load() {
			p.log.Error(err, "could not ask the kubelet for its CPU and memory manager policies; keeping its last answer",
				"staticCPU", p.staticCPU.Load(), "staticMemory", p.staticMemory.Load())
		} else {
			p.log.Error(err, "could not ask the kubelet for its CPU and memory manager policies; pinning nothing until it answers")
		}
		return
	}
	// The answer is stored before it is marked known: a worker that sees it known
	// must see what it says.
	if was := p.staticCPU.Swap(policies.StaticCPU); !was && policies.StaticCPU {
		p.log.Info("the kubelet runs the static CPU manager policy and sets containers' cpusets itself; sextant pins no pod on this node (see docs/numa.md)")
	}
	if was := p.staticMemory.Swap(policies.StaticMemory); !was && policies.StaticMemory {
		p.log.Info("the kubelet runs the Static memory manager policy and sets containers' memory nodes itself; sextant pins no pod on this node (see docs/numa.md)")
	}
	if !p.policyKnown.Swap(true) {
		// Pods that waited for the answer go now.
		p.enqueueAll()
	}
}
