package bandwidth

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
)

const scoreKey fwk.StateKey = Name + "/scores"

// scoreState is what PreScore fixed for the cycle's scoring: the pod's request and the
// clock reports are judged stale against. Its presence tells NormalizeScore that
// PreScore did not skip the pod.
//
// Score reads its node's report and returns what the node has available per direction,
// encoded in the raw score (encodeAvail); NormalizeScore turns those into scores,
// because a node's score depends on the other nodes (each direction is scaled by the
// worst or best node). Reading the reports in Score rather than PreScore keeps them off
// the serial scheduling loop, and the raw score needs no per-pod table of nodes
// (docs/design/0008-bandwidth-scores-in-score.md).
type scoreState struct {
	req annotations.BandwidthRequest
	now time.Time
}

func (s *scoreState) Clone() fwk.StateData { return s }

// PreScore prepares the cycle's scoring, or returns Skip for pods the plugin ignores so
// that Score has no influence on them.
func (pl *BandwidthAware) PreScore(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	ps, ok := pl.podState(state, pod)
	if !ok || ps.req.Empty() || !pl.weighted(ps.req) {
		return fwk.NewStatus(fwk.Skip)
	}
	state.Write(scoreKey, &scoreState{req: ps.req, now: ps.now})
	return nil
}

// Score returns what the node has available per direction (encodeAvail), which
// NormalizeScore replaces with the node's score.
func (pl *BandwidthAware) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, ok := readScoreState(state)
	node := nodeInfo.Node()
	if !ok || node == nil {
		// Without PreScore's state NormalizeScore scores every node 0.
		return 0, nil
	}
	return encodeAvail(pl.available(pl.reports.NodeOf(node), networkOf(s.req), s.now)), nil
}

// A raw score holds both directions' available rates, ingress in the high 32 bits and
// egress in the low 32, each as availField: 0 for "no usable report", else the rate in
// kbit/s offset by availOffset, clamped to what fits (about -1 to +3.2 Tbit/s). A kbit/s
// is far below what tells two nodes apart in a score.
const (
	availUnit   = 1000
	availOffset = 1 << 30
	availMin    = 1 - availOffset
	availMax    = 1<<32 - 1 - availOffset
)

func availField(a avail) uint64 {
	if !a.ok {
		return 0
	}
	return uint64(min(max(a.bits/availUnit, availMin), availMax) + availOffset)
}

func availOf(field uint64) avail {
	if field == 0 {
		return avail{}
	}
	return avail{bits: (int64(field) - availOffset) * availUnit, ok: true}
}

func encodeAvail(ingress, egress avail) int64 {
	return int64(availField(ingress)<<32 | availField(egress))
}

func decodeAvail(raw int64) (ingress, egress avail) {
	return availOf(uint64(raw) >> 32), availOf(uint64(raw) & math.MaxUint32)
}

func readScoreState(state fwk.CycleState) (*scoreState, bool) {
	if state == nil {
		return nil, false
	}
	d, err := state.Read(scoreKey)
	if err != nil {
		return nil, false
	}
	s, ok := d.(*scoreState)
	return s, ok
}

// ScoreExtensions implements fwk.ScorePlugin.
func (pl *BandwidthAware) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore scores the nodes from what Score returned (see scoreAvailable), then
// stretches the scores so the best node gets MaxNodeScore, keeping their ratios: a node
// twice as far from the target keeps half the score, instead of min-max scaling blowing
// tiny differences up to the full range.
func (pl *BandwidthAware) NormalizeScore(ctx context.Context, state fwk.CycleState, pod *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	s, ok := readScoreState(state)
	if !ok {
		// PreScore skipped the pod: no node is preferred.
		for i := range scores {
			scores[i].Score = 0
		}
		return nil
	}
	var raw []int64
	logger := klog.FromContext(ctx).V(4)
	if logger.Enabled() {
		raw = make([]int64, len(scores))
		for i := range scores {
			raw[i] = scores[i].Score
		}
	}
	dirs := pl.scoreAvailable(s.req, scores)
	stretch(scores)
	if raw != nil {
		logTopScores(logger, pod, pl.strategy(s.req), dirs, raw, scores)
	}
	return nil
}

// topScoresLogged is how many of the best nodes logTopScores shows per pod.
const topScoresLogged = 3

// logTopScores logs, for the best-scoring nodes, what each had available and its score
// per direction (0-100, before weighting), so an SRE tuning the weights sees why a node
// won (-v=4).
func logTopScores(logger klog.Logger, pod *v1.Pod, strategy annotations.Strategy, dirs [2]directionScale, raw []int64, scores fwk.NodeScoreList) {
	order := make([]int, len(scores))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(scores[b].Score, scores[a].Score) })
	for rank, i := range order[:min(topScoresLogged, len(order))] {
		in, eg := decodeAvail(raw[i])
		logger.Info("BandwidthAware score", "pod", klog.KObj(pod), "rank", rank+1, "node", scores[i].Name, "score", scores[i].Score,
			"strategy", strategy,
			"ingressAvailable", formatAvail(in), "ingressScore", dirs[0].percent(in), "ingressWeight", dirs[0].weight,
			"egressAvailable", formatAvail(eg), "egressScore", dirs[1].percent(eg), "egressWeight", dirs[1].weight)
	}
}

func formatAvail(a avail) string {
	if !a.ok {
		return "no report"
	}
	return annotations.FormatRate(max(a.bits, 0))
}

// percent is the node's unweighted score in this direction, 0-100; -1 when the
// direction does not count for the pod.
func (d *directionScale) percent(a avail) int64 {
	if !d.counts {
		return -1
	}
	if d.weight == 0 {
		return 0
	}
	return int64(math.Round(d.weighted(a) / d.weight * float64(fwk.MaxNodeScore)))
}

// stretch scales scores so the highest becomes MaxNodeScore, keeping their ratios.
func stretch(scores fwk.NodeScoreList) {
	var hi int64
	for _, s := range scores {
		hi = max(hi, s.Score)
	}
	if hi <= 0 {
		return
	}
	for i := range scores {
		scores[i].Score = scores[i].Score * fwk.MaxNodeScore / hi
	}
}

// weighted reports whether any direction of req counts in the score: it has a target
// and a weight above 0.
func (pl *BandwidthAware) weighted(req annotations.BandwidthRequest) bool {
	_, in := req.Ingress.Target()
	_, eg := req.Egress.Target()
	return in && pl.args.IngressWeight > 0 || eg && pl.args.EgressWeight > 0
}

// scoreAvailable replaces each node's raw score (what it has available per direction,
// encodeAvail) with its score in [0, MaxNodeScore], in place: NormalizeScore runs once
// per pod with bandwidth annotations, over every feasible node. Per direction the pod has
// a target (expected, else required) for:
//
//	best-fit:      1 - |available - target| / (largest such distance among the nodes)
//	most-headroom: available / (largest available among the nodes)
//
// (most-headroom ranks by available - target; dividing available rather than the
// difference keeps the scale anchored at zero). A node without a usable report scores 0
// in that direction. Directions combine as a weighted mean with the ingress/egress
// weights; all scores are 0 when no direction counts (see weighted).
func (pl *BandwidthAware) scoreAvailable(req annotations.BandwidthRequest, scores fwk.NodeScoreList) [2]directionScale {
	strategy := pl.strategy(req)
	var dirs [2]directionScale
	var weightSum float64
	for i, d := range [2]struct {
		dir    annotations.Direction
		weight int64
	}{{req.Ingress, pl.args.IngressWeight}, {req.Egress, pl.args.EgressWeight}} {
		target, ok := d.dir.Target()
		if !ok || d.weight <= 0 {
			continue
		}
		dirs[i] = directionScale{counts: true, strategy: strategy, target: target, weight: float64(d.weight)}
		weightSum += float64(d.weight)
	}
	if weightSum == 0 {
		for i := range scores {
			scores[i].Score = 0
		}
		return dirs
	}
	for _, sc := range scores {
		in, eg := decodeAvail(sc.Score)
		dirs[0].see(in)
		dirs[1].see(eg)
	}
	for i, sc := range scores {
		in, eg := decodeAvail(sc.Score)
		total := dirs[0].weighted(in) + dirs[1].weighted(eg)
		scores[i].Score = int64(math.Round(total / weightSum * float64(fwk.MaxNodeScore)))
	}
	return dirs
}

// directionScale scores one direction of the pod's request over the feasible nodes: see
// every node's available rate first, then ask for each node's weighted score.
type directionScale struct {
	counts   bool // the pod has a target in this direction and its weight is above 0
	strategy annotations.Strategy
	target   int64
	weight   float64
	// scale is the largest available (most-headroom) or the largest distance from the
	// target (best-fit) among the nodes seen with a usable report.
	scale float64
}

func (d *directionScale) see(a avail) {
	if !d.counts || !a.ok {
		return
	}
	if d.strategy == annotations.MostHeadroom {
		d.scale = max(d.scale, float64(a.bits))
		return
	}
	d.scale = max(d.scale, math.Abs(float64(a.bits)-float64(d.target)))
}

// weighted is the node's score in this direction, in [0, 1], times the weight.
func (d *directionScale) weighted(a avail) float64 {
	if !d.counts || !a.ok {
		return 0
	}
	if d.strategy == annotations.MostHeadroom {
		if d.scale <= 0 || a.bits <= 0 {
			return 0
		}
		return d.weight * float64(a.bits) / d.scale
	}
	if d.scale == 0 {
		return d.weight
	}
	return d.weight * (1 - math.Abs(float64(a.bits)-float64(d.target))/d.scale)
}

// avail is one node's available rate in one direction; ok is false without a usable
// report.
type avail struct {
	bits int64
	ok   bool
}
