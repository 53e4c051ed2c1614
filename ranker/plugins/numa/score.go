package numa

import (
	"context"
	"math"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// Raw scores encode the best choice as count<<32 | distance (lower is better); 0 means
// "cannot be scored by NUMA" (no NodeTopology, or the request does not fit), which
// NormalizeScore maps to the lowest score.
const countShift = 32

// scoreOneNUMANode is the encoded choice of one NUMA node, at distance 0.
const scoreOneNUMANode = int64(1) << countShift

func encode(ch Choice) int64 {
	d := min(ch.Distance, int64(math.MaxUint32))
	return int64(len(ch.Nodes))<<countShift | d
}

func decode(raw int64) (count, distance int64) {
	return raw >> countShift, raw & math.MaxUint32
}

// PreScore skips scoring for pods that ask for neither CPU nor memory, and when every
// node that passed Filter fits the pod in one NUMA node: all would score the same, and
// a score added equally to every node changes no ranking. For a pod that skipped Filter
// (see floor), that is when no feasible node lacks NodeTopology.
func (pl *NUMAAware) PreScore(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	s, ok := readState(state)
	if !ok || s.idle() {
		return fwk.NewStatus(fwk.Skip)
	}
	if len(s.bare) > 0 && !s.uneven.Load() && anyOf(nodes, s.bare) {
		s.uneven.Store(true)
	}
	if !s.uneven.Load() {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score returns the encoded best choice for the node (see encode); NormalizeScore turns
// it into a score where fewer NUMA nodes always win.
func (pl *NUMAAware) Score(ctx context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, ok := readState(state)
	if !ok || s.idle() {
		return 0, nil
	}
	if s.fast != nil && s.fast.one && s.fast.covers(nodeInfo.GetGeneration()) {
		return scoreOneNUMANode, nil
	}
	node := nodeInfo.Node()
	if node == nil {
		return 0, nil
	}
	nf, topo, ok := pl.numaFree(node, nodeInfo)
	if !ok {
		return 0, nil
	}
	ch, ok, refusal, err := s.choose(ctx, nf, topo, node)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	if !ok || refusal != nil {
		return 0, nil
	}
	return encode(ch), nil
}

// ScoreExtensions returns the plugin itself: it normalizes its scores.
func (pl *NUMAAware) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore maps encoded choices to [0, MaxNodeScore]. Each NUMA-node count between
// the best and the worst seen gets an equal band, fewest on top; within a band a larger
// distance sum costs up to half the band, so the distance breaks ties but never
// outweighs a NUMA node fewer. Unscorable nodes get 0.
func (pl *NUMAAware) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	NormalizeScores(scores)
	return nil
}

// NormalizeScores is NormalizeScore without the framework arguments.
func NormalizeScores(scores fwk.NodeScoreList) {
	var kmin, kmax int64 = math.MaxInt64, 0
	dmin := map[int64]int64{}
	dmax := map[int64]int64{}
	for _, s := range scores {
		if s.Score <= 0 {
			continue
		}
		k, d := decode(s.Score)
		kmin, kmax = min(kmin, k), max(kmax, k)
		if cur, ok := dmin[k]; !ok || d < cur {
			dmin[k] = d
		}
		if cur, ok := dmax[k]; !ok || d > cur {
			dmax[k] = d
		}
	}
	band := float64(fwk.MaxNodeScore) / float64(kmax-kmin+1)
	for i := range scores {
		if scores[i].Score <= 0 {
			scores[i].Score = fwk.MinNodeScore
			continue
		}
		k, d := decode(scores[i].Score)
		top := float64(fwk.MaxNodeScore) - float64(k-kmin)*band
		if span := dmax[k] - dmin[k]; span > 0 {
			top -= band / 2 * float64(d-dmin[k]) / float64(span)
		}
		scores[i].Score = max(fwk.MinNodeScore, min(fwk.MaxNodeScore, int64(math.Round(top))))
	}
}
