package numapin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"sextant.io/sextant/agent/cgroups"
)

// pin narrows the pod's cgroup if it does not hold the set, and confirms the pin once
// the pod has a child cgroup inside the narrowed one.
func (p *Pinner) pin(ctx context.Context, pod *corev1.Pod, st *podState, kp *cgroups.Kubepods, dir string) error {
	st.dir = dir
	children, err := cgroups.Children(dir)
	if errors.Is(err, cgroups.ErrGone) {
		return nil
	} else if err != nil {
		return err
	}
	if len(children) == 0 {
		st.advance(stepLookEmpty)
	} else {
		st.advance(stepLookRunning)
	}
	held, err := holds(kp, dir, st.want)
	if errors.Is(err, cgroups.ErrGone) {
		return nil
	} else if err != nil {
		return err
	}
	if !held {
		res, err := kp.Narrow(dir, st.want)
		if errors.Is(err, cgroups.ErrGone) {
			return nil
		}
		if err != nil {
			p.metrics.failures.WithLabelValues(reasonCgroup).Inc()
			return err
		}
		p.classify(st, res)
		p.reportNarrowed(ctx, pod, st)
		if err := p.verify(kp, dir, st.want); err != nil {
			return err
		}
		if children, err = cgroups.Children(dir); err != nil {
			return nil
		}
	}
	if len(children) == 0 {
		p.follow(pod, dir)
		return nil
	}
	if from, moved := st.advance(stepConfirm); moved {
		if w := p.watcher.Load(); w != nil {
			w.Unfollow(dir)
		}
		if from == phaseFresh {
			st.path, st.narrowedAt = pathPodCgroup, p.now() // the cgroup already held the set (one NUMA node)
		}
		p.reportConfirmed(pod, st)
	}
	p.rtQueue.Add(keyOf(pod))
	return nil
}

// holds says whether the set in force in the pod cgroup dir is want; a cgroup without
// cpuset files is ErrNoCpuset, which is retried quietly for a while.
func holds(kp *cgroups.Kubepods, dir string, want cgroups.Cpuset) (bool, error) {
	eff, err := kp.Effective(dir)
	if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("cgroup %s has no cpuset files: %w", dir, cgroups.Missing(dir))
	}
	if err != nil {
		return false, err
	}
	return eff.Equal(want), nil
}

// classify records how the narrowing just made pins the pod, the label it is counted
// under once confirmed, and when it was made.
func (p *Pinner) classify(st *podState, res cgroups.Narrowed) {
	st.path = pathOf(st.phase, st.foreign != "", res.Children, st.path)
	st.narrowedAt = p.now()
	st.advance(stepNarrow)
}

// pathOf is how a narrowing pins a pod in phase ph that had children child cgroups
// when the narrowing began: a pod pinned before, or found narrowed by someone else
// (foreign), is repaired; one without children is pinned at its pod cgroup, unless an
// earlier narrowing of this process had to catch up already.
func pathOf(ph phase, foreign bool, children int, last string) string {
	switch {
	case ph == phaseConfirmed, foreign:
		return pathRepair
	case children == 0 && last != pathCatchUp:
		return pathPodCgroup
	default:
		return pathCatchUp
	}
}

// verify reads back the set in force after a narrowing: the kernel is the judge, and on
// v2 the set is also bounded by the parents' (a kubepods cgroup without those CPUs, say).
func (p *Pinner) verify(kp *cgroups.Kubepods, dir string, want cgroups.Cpuset) error {
	eff, err := kp.Effective(dir)
	if err != nil {
		return err
	}
	if !eff.Equal(want) {
		p.metrics.failures.WithLabelValues(reasonCgroup).Inc()
		return fmt.Errorf("cgroup %s holds %s after narrowing it to %s", dir, eff, want)
	}
	return nil
}

// follow watches a pinned pod cgroup that has no child yet. The pin is confirmed only
// once a container cgroup exists inside the narrowed one: on v1 the kubelet copies the
// parent's set into a new pod cgroup right after making it, and that copy can land
// after the narrowing. Following the cgroup brings the pod back at that write and when
// the sandbox's cgroup appears.
func (p *Pinner) follow(pod *corev1.Pod, dir string) {
	if w := p.watcher.Load(); w != nil {
		if err := w.Follow(string(pod.UID), dir); err != nil {
			p.log.Error(err, "cannot follow a pod cgroup; the resync checks it instead", "dir", dir)
		}
	}
}

// narrowed says whether the pod cgroup dir, asking for cur, asks for less than its
// parent has, i.e. was narrowed by someone.
func (p *Pinner) narrowed(kp *cgroups.Kubepods, dir string, cur cgroups.Cpuset) bool {
	parent, err := kp.Effective(filepath.Dir(dir))
	if err != nil {
		return false
	}
	if kp.Version == cgroups.V2 {
		// An empty part asks for the parent's.
		if len(cur.CPUs) == 0 {
			cur.CPUs = parent.CPUs
		}
		if len(cur.Mems) == 0 {
			cur.Mems = parent.Mems
		}
	} else if len(cur.CPUs) == 0 || len(cur.Mems) == 0 {
		// Nothing written yet, or the kubelet's copy of the parent's set half written
		// (libcontainer writes cpus, then mems): no one's narrowing.
		return false
	}
	return cur.Within(parent) && !cur.Equal(parent)
}
