package plan

import (
	"math"

	opt "github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Holding the previous weights against small moves.
//
// The churn term stops moves whose marginal-latency gain is below 2κ of
// the latency at stake, but the profile estimates of engines serving a few
// hundred requests a window are noisier than that at their margin (the
// marginal latency f + u·f' carries the fitted slope), and the optimizer
// then moves a few percent of a cluster's traffic back and forth from
// window to window: each such move costs prefix-cache affinity and counts
// as a weight reversal, and none of them changes what the latency can
// show. So when the solver's weights for a cluster differ from its churn
// reference by less than holdShare in total variation (½·Σ|w − previous|),
// the cluster keeps the previous weights (and its previous failover
// split, spill.go), provided that keeping them puts no engine above
// holdOverload × MaxUtilization × capacity and none that is unhealthy
// (else every held cluster takes the solver's weights). The band above
// MaxUtilization is the hysteresis: where capacity binds, the solver's
// weights follow every window's demand noise, and without the band a
// hold was undone in about half of the windows of region-bc (119
// reversals; 50 with the band, p99 TTFT and goodput unchanged; hetero-fleet
// 229 → 157, diurnal 94 → 50). MaxUtilization is itself a margin below
// capacity, so the band still leaves headroom (0.9 × 1.05 < 1). Moves
// accumulate against the held weights, so a slow drift moves once it
// reaches holdShare; a 30% latency gap between two engines moves far more
// (TestRelativeChurn).
//
// Measured with `switchyard sim` on the shipped scenarios, seeds 1-3, with
// the relative churn term (docs/optimizer.md): without holding, reversals
// rose over the absolute 500 ms/rps on four of six scenarios (flash-crowd
// 10 → 70); holding at 5% halved that, at 10% reversals were at or below
// the old counts in most cells (Mooncake trace 1,507 → 328). Holding with
// a strong churn term (500 ms/rps, or κ = 0.3) made hetero-fleet's p99 TTFT
// 1.7× worse: the two together freeze weights.
const holdShare = 0.1

// holdOverload is how far above MaxUtilization × capacity held weights
// may load an engine (see above).
const holdOverload = 1.05

func (s Settings) holdShare() float64 { return holdShare }

// hold rewrites the clusters of cws whose solver weights are within share
// of in.Previous back to those previous weights (see above), and returns
// the clusters held.
func hold(in *opt.Instance, share float64, cws []*schemas.ClusterWeights) map[string]bool {
	if len(in.Previous) == 0 {
		return nil
	}
	type saved struct {
		w   *schemas.EngineWeight
		old float64
	}
	var undo []saved
	held := map[string]bool{}
	for _, cw := range cws {
		prev := in.Previous[cw.GetCluster()]
		if len(prev) == 0 || cw.GetShedFraction() > 0 {
			continue
		}
		var psum, tv float64
		for _, w := range cw.GetWeights() {
			psum += prev[w.GetEngineId()]
		}
		if !(psum > 0) {
			continue
		}
		for _, w := range cw.GetWeights() {
			tv += math.Abs(w.GetWeight() - prev[w.GetEngineId()]/psum)
		}
		if tv/2 >= share || tv == 0 {
			continue
		}
		for _, w := range cw.GetWeights() {
			undo = append(undo, saved{w, w.Weight})
			w.Weight = prev[w.GetEngineId()] / psum
		}
		held[cw.GetCluster()] = true
	}
	if len(undo) == 0 {
		return nil
	}
	load := map[string]float64{}
	for _, cw := range cws {
		for _, w := range cw.GetWeights() {
			load[w.GetEngineId()] += cw.GetDemandRps() * w.GetWeight()
		}
	}
	for _, e := range in.Engines {
		if l := load[e.ID]; l > 0 && (!e.Healthy || l > in.MaxUtilization*e.CapacityRPS*holdOverload) {
			for _, u := range undo {
				u.w.Weight = u.old
			}
			return nil
		}
	}
	return held
}
