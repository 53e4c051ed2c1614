package numapin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"sextant.io/sextant/agent/topology"
	"sextant.io/sextant/cri"
	"sextant.io/sextant/internal/liveness"
)

func (p *Pinner) processRuntime(ctx context.Context) bool {
	key, quit := p.rtQueue.Get()
	if quit {
		return false
	}
	defer p.rtQueue.Done(key)
	if key == liveness.ProbeKey {
		p.rtBeat.Mark(p.now())
		return true
	}
	if err := p.syncRuntime(ctx, key); err != nil {
		if ctx.Err() == nil {
			p.log.Error(err, "recording a pod's NUMA cpuset in the container runtime failed; retrying", "pod", key)
		}
		p.rtQueue.AddRateLimited(key)
		return true
	}
	p.rtQueue.Forget(key)
	return true
}

// syncRuntime makes the runtime's record of a pinned pod's containers agree with their
// cgroups. A container that ran before its pod was narrowed (catch-up, repair) is told
// the set through CRI UpdateContainerResources, every other resource kept; so is one
// whose record names another set. Containers made inside the narrowed pod cgroup
// inherit it and have no set of their own to correct. Each container is looked at once
// per agent process.
func (p *Pinner) syncRuntime(ctx context.Context, key string) error {
	obj, exists, err := p.pods.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil
	}
	pod := obj.(*corev1.Pod)
	p.mu.Lock()
	st, ok := p.state[pod.UID]
	p.mu.Unlock()
	if !ok {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.confirmed() {
		return nil
	}
	if st.announce != "" {
		p.event(ctx, pod, corev1.EventTypeNormal, "NUMAPinned", "numa-pinned", st.announce)
		st.announce = ""
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.RuntimeTimeout)
	defer cancel()
	ctrs, err := p.rt.PodContainers(cctx, string(pod.UID))
	if err != nil {
		return err
	}
	wantCPUs, wantMems := topology.FormatCPUList(st.want.CPUs), topology.FormatCPUList(st.want.Mems)
	for _, c := range ctrs {
		if st.checked[c.ID] || c.State != cri.StateRunning && c.State != cri.StateCreated {
			continue
		}
		cpus, mems, err := p.rt.ContainerCpuset(cctx, c.ID)
		if cri.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		ranBefore := (st.path == pathCatchUp || st.path == pathRepair) && c.CreatedAt.Before(st.narrowedAt)
		other := cpus != "" && cpus != wantCPUs || mems != "" && mems != wantMems
		if ranBefore && (cpus != wantCPUs || mems != wantMems) || other {
			if err := p.rt.UpdateCpuset(cctx, c.ID, wantCPUs, wantMems); err != nil && !cri.IsNotFound(err) {
				p.metrics.runtime.WithLabelValues("failed").Inc()
				p.metrics.failures.WithLabelValues(reasonRuntime).Inc()
				return fmt.Errorf("container %s of pod %s: %w", c.Name, key, err)
			}
			p.metrics.runtime.WithLabelValues("updated").Inc()
		}
		st.checked[c.ID] = true
	}
	return nil
}
