package plan

import (
	"maps"
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
// show. So when the solver's routed shares for a cluster ((1 − shed) ×
// weight) differ from its churn reference by less than holdShare in total
// variation (½·(Σ|share − previous| + shed)), the cluster keeps the
// previous weights, shedding nothing (and its previous failover split,
// spill.go), provided that keeping them puts no engine above
// min(holdOverload × MaxUtilization, 1) × capacity and none that is
// unhealthy.
// Where the held weights would overload an engine, the held clusters'
// routed shares and shed fractions move toward the solver's only as far
// as that engine's band edge (bandMove); an unhealthy engine, or one the
// solver's weights do not relieve, lets every held cluster take the
// solver's weights. Moving only as far as needed is a ratchet: demand
// noise that pushed an engine past the band moves the weights once, and
// the noise falling back moves nothing, where a full move followed the
// noise both ways; and a cluster whose capacity is just short sheds only
// what the band cannot carry, where it used to shed 1–5% in one window
// and nothing in the next (`go run ./bench/sim -traces "" -seeds 2`,
// mean reversals per scenario, full move → partial → partial with shed:
// region-bc 70 → 50 → 10, hetero-fleet 51 → 28 → 28, diurnal 35 → 12 → 9,
// region-outage 42 → 24 → 24, engine-restart 8 → 5 → 5, flash-crowd
// 8 → 6 → 6; no p99 or goodput cell changed its verdict, region-bc's
// goodput 110.6–110.9 → 111.0–111.1 rps). The band above
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
	var keep []heldCluster
	held := map[string]bool{}
	for _, cw := range cws {
		if h, ok := holdable(in.Previous[cw.GetCluster()], share, cw); ok {
			keep = append(keep, h)
			held[cw.GetCluster()] = true
		}
	}
	if len(keep) == 0 {
		return nil
	}
	solver := loads(cws)
	heldLoad := maps.Clone(solver)
	for _, h := range keep {
		d := h.cw.GetDemandRps()
		for i, w := range h.cw.GetWeights() {
			heldLoad[w.GetEngineId()] += d * (h.prev[i] - h.routed[i])
		}
	}
	lambda := bandMove(in, heldLoad, solver)
	if lambda >= 1 {
		return nil // the solver's weights stand
	}
	for _, h := range keep {
		// The weights are shares of the cluster's whole demand (they and
		// the shed fraction add up to 1): the mix of the previous weights
		// (adding up to 1) and the solver's (adding up to 1 − its shed)
		// adds up to 1 − λ × its shed, the new shed fraction.
		shed := lambda * h.cw.GetShedFraction()
		for i, w := range h.cw.GetWeights() {
			w.Weight = h.prev[i] + lambda*(h.routed[i]-h.prev[i])
			labelHeld(w)
		}
		h.cw.ShedFraction = shed
	}
	return held
}

// heldCluster is a cluster hold keeps: per weight, in cw's order, the
// share of its demand the solver routes to the engine (the weight: the
// weights and the shed fraction add up to 1) and the previous weight
// (normalised over cw's engines).
type heldCluster struct {
	cw           *schemas.ClusterWeights
	routed, prev []float64
}

// holdable reports whether cw's solver weights and shed fraction are
// within share of prev in total variation over the routed shares (the
// shed fraction counting as a share that left), and returns the shares.
func holdable(prev map[string]float64, share float64, cw *schemas.ClusterWeights) (heldCluster, bool) {
	f := cw.GetShedFraction()
	if len(prev) == 0 || !(f >= 0 && f < 1) {
		return heldCluster{}, false
	}
	var psum float64
	for _, w := range cw.GetWeights() {
		psum += prev[w.GetEngineId()]
	}
	if !(psum > 0) || math.IsInf(psum, 0) {
		return heldCluster{}, false
	}
	h := heldCluster{cw: cw}
	tv := f
	for _, w := range cw.GetWeights() {
		r, p := w.GetWeight(), prev[w.GetEngineId()]/psum
		h.routed, h.prev = append(h.routed, r), append(h.prev, p)
		tv += math.Abs(r - p)
	}
	if !(tv/2 < share) || tv == 0 {
		return heldCluster{}, false
	}
	return h, true
}

// loads returns each engine's routed demand under cws's weights and
// shed fractions.
func loads(cws []*schemas.ClusterWeights) map[string]float64 {
	load := map[string]float64{}
	for _, cw := range cws {
		d := cw.GetDemandRps() // weights are shares of the whole demand, shed apart
		for _, w := range cw.GetWeights() {
			load[w.GetEngineId()] += d * w.GetWeight()
		}
	}
	return load
}

// bandMove returns how far, as a share λ in [0, 1] of the way from the
// held weights' loads to the solver's, the held clusters must move for
// no engine to carry more than min(holdOverload × MaxUtilization, 1) ×
// capacity: 0 when the held weights fit, 1 (the solver's weights) when
// an engine they load is unhealthy or the solver's own loads do not
// bring an overloaded engine down. Loads are linear in λ, so each overloaded
// engine needs λ ≥ (held − limit) / (held − solver).
func bandMove(in *opt.Instance, held, solver map[string]float64) float64 {
	lambda := 0.0
	for _, e := range in.Engines {
		l := held[e.ID]
		if !(l > 0) {
			continue
		}
		if !e.Healthy {
			return 1
		}
		// Never past capacity itself, whatever MaxUtilization is.
		lim := min(in.MaxUtilization*holdOverload, 1) * e.CapacityRPS
		if !(l > lim) {
			continue
		}
		s := solver[e.ID]
		if !(s < l) {
			return 1
		}
		lambda = max(lambda, (l-lim)/(l-s))
	}
	if !(lambda < 1) { // NaN from a non-finite capacity included
		return 1
	}
	return lambda
}

// labelHeld names the hold in a held weight's binding (explain prints
// it): "hold" replaces the solver's "zero" and "churn", which described
// weights the hold discarded, on an engine the held weights use.
func labelHeld(w *schemas.EngineWeight) {
	if w.GetWeight() <= 0 || w.GetExplanation() == nil {
		return
	}
	b := w.Explanation.Binding[:0:0]
	for _, x := range w.Explanation.Binding {
		if x != "zero" && x != "churn" {
			b = append(b, x)
		}
	}
	w.Explanation.Binding = append(b, "hold")
}
