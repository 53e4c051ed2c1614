package bandwidth

import (
	"context"
	"math"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

const scoreKey fwk.StateKey = Name + "/scores"

// scoreState holds every feasible node's score, computed once in PreScore because a
// node's score depends on the other nodes (each direction is scaled by the worst or best
// node). Read-only afterwards, so Score may read it from parallel goroutines.
type scoreState struct {
	// scores is keyed by the snapshot's Node objects, which kube-scheduler hands to
	// Score again: hashing an address reads no memory, hashing a name reads its bytes.
	scores map[*v1.Node]int64
}

// score is the node's score; a Node object PreScore was not given is found by name.
func (s *scoreState) score(node *v1.Node) int64 {
	if v, ok := s.scores[node]; ok {
		return v
	}
	for n, v := range s.scores {
		if n.Name == node.Name {
			return v
		}
	}
	return 0
}

func (s *scoreState) Clone() fwk.StateData { return s }

// PreScore scores all feasible nodes, or returns Skip for pods the plugin ignores so
// that Score has no influence on them.
func (pl *BandwidthAware) PreScore(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	ps, ok := pl.podState(state, pod)
	if !ok || ps.req.Empty() {
		return fwk.NewStatus(fwk.Skip)
	}
	objs := make([]*v1.Node, 0, len(nodes))
	for _, n := range nodes {
		if node := n.Node(); node != nil {
			objs = append(objs, node)
		}
	}
	scores, ok := pl.scoreNodes(ps.req, objs, ps.now)
	if !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	state.Write(scoreKey, &scoreState{scores: scores})
	return nil
}

// Score returns the node's score computed in PreScore.
func (pl *BandwidthAware) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	d, err := state.Read(scoreKey)
	if err != nil {
		return 0, nil
	}
	s, ok := d.(*scoreState)
	if !ok || nodeInfo.Node() == nil {
		return 0, nil
	}
	return s.score(nodeInfo.Node()), nil
}

// ScoreExtensions implements fwk.ScorePlugin.
func (pl *BandwidthAware) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore stretches the scores so the best node gets MaxNodeScore, keeping their
// ratios: a node twice as far from the target keeps half the score, instead of min-max
// scaling blowing tiny differences up to the full range.
func (pl *BandwidthAware) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	var hi int64
	for _, s := range scores {
		hi = max(hi, s.Score)
	}
	if hi <= 0 {
		return nil
	}
	for i := range scores {
		scores[i].Score = scores[i].Score * fwk.MaxNodeScore / hi
	}
	return nil
}

// scoreNodes scores each node in [0, MaxNodeScore]. Per direction the pod has a target
// (expected, else required) for:
//
//	best-fit:      1 - |available - target| / (largest such distance among the nodes)
//	most-headroom: available / (largest available among the nodes)
//
// (most-headroom ranks by available - target; dividing available rather than the
// difference keeps the scale anchored at zero). A node without a usable report scores 0
// in that direction. Directions combine as a weighted mean with the ingress/egress
// weights. ok is false when no direction counts (all counted weights are 0).
func (pl *BandwidthAware) scoreNodes(req Request, nodes []*v1.Node, now time.Time) (map[*v1.Node]int64, bool) {
	strategy := req.Strategy
	if strategy == "" {
		strategy = pl.args.Strategy
	}
	ingress, egress := pl.availableAll(nodes, now)
	total := make([]float64, len(nodes))
	var weightSum float64
	for _, dir := range [...]struct {
		d      Direction
		weight int64
		av     []avail
	}{
		{req.Ingress, pl.args.IngressWeight, ingress},
		{req.Egress, pl.args.EgressWeight, egress},
	} {
		target, ok := dir.d.Target()
		if !ok || dir.weight == 0 {
			continue
		}
		w := float64(dir.weight)
		weightSum += w
		for i, s := range directionScores(strategy, target, dir.av) {
			total[i] += w * s
		}
	}
	if weightSum == 0 {
		return nil, false
	}
	out := make(map[*v1.Node]int64, len(nodes))
	for i, n := range nodes {
		out[n] = int64(math.Round(total[i] / weightSum * float64(fwk.MaxNodeScore)))
	}
	return out, true
}

// avail is one node's available rate in one direction; ok is false without a usable
// report.
type avail struct {
	bits int64
	ok   bool
}

// availableAll reads each node's report and reservations once for both directions.
func (pl *BandwidthAware) availableAll(nodes []*v1.Node, now time.Time) (ingress, egress []avail) {
	ingress, egress = make([]avail, len(nodes)), make([]avail, len(nodes))
	for i, n := range nodes {
		ingress[i], egress[i] = pl.available(pl.reports.NodeOf(n), now)
	}
	return ingress, egress
}

// directionScores scores each node in [0, 1] for one direction.
func directionScores(strategy Strategy, target int64, av []avail) []float64 {
	out := make([]float64, len(av))
	switch strategy {
	case MostHeadroom:
		var hi float64
		for _, a := range av {
			if a.ok {
				hi = max(hi, float64(a.bits))
			}
		}
		if hi <= 0 {
			return out
		}
		for i, a := range av {
			if a.ok && a.bits > 0 {
				out[i] = float64(a.bits) / hi
			}
		}
	default: // BestFit
		var worst float64
		for _, a := range av {
			if a.ok {
				worst = max(worst, math.Abs(float64(a.bits)-float64(target)))
			}
		}
		for i, a := range av {
			if !a.ok {
				continue
			}
			if worst == 0 {
				out[i] = 1
				continue
			}
			out[i] = 1 - math.Abs(float64(a.bits)-float64(target))/worst
		}
	}
	return out
}
