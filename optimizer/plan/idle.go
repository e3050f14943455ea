package plan

import (
	"math"

	opt "github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Idle clusters.
//
// A cluster whose demand is at the floor (between bursts of a bursty
// trace, or before its traffic starts) puts almost no load anywhere: every
// engine's profile is flat there and the optimizer is indifferent between
// splits, so its weights are whatever the solver's path ended on, and the
// churn term then carries that arbitrary split into the next burst
// (cross-region share rose to ~23% on a bursty trace with no latency
// reason). So an idle cluster (demand estimate at most
// max(Settings.IdleDemandRPS, MinDemandRPS)) is given
//
//   - its previous weights as the solver holds them, when those were made
//     under real demand (they are the best guess for the next burst);
//   - otherwise, a split by capacity over its nearest usable engines
//     (healthy, reachable, with a network latency within spillTierMs of
//     the nearest), which the failover split then completes.

// idleRPS is the demand at or below which a cluster is idle (-1: never).
func (s Settings) idleRPS() float64 {
	if s.IdleDemandRPS < 0 {
		return -1
	}
	return math.Max(s.IdleDemandRPS, s.MinDemandRPS)
}

// idleClusters returns the clusters of in that are idle given their raw
// demand estimates (a cluster without one is at the floor).
func idleClusters(in *opt.Instance, raw map[string]float64, set Settings) map[string]bool {
	lim := set.idleRPS()
	if lim < 0 {
		return nil
	}
	out := map[string]bool{}
	for _, c := range in.Clusters {
		if raw[c.ID] <= lim {
			out[c.ID] = true
		}
	}
	return out
}

// spreadIdle rewrites the weights of the idle clusters whose previous
// weights were not made under real demand into a split by capacity over
// their nearest usable engines.
func spreadIdle(in *opt.Instance, idle map[string]bool, previous map[string]*previousPlan, cws []*schemas.ClusterWeights) {
	engines := make(map[string]*opt.Engine, len(in.Engines))
	for i := range in.Engines {
		engines[in.Engines[i].ID] = &in.Engines[i]
	}
	for _, cw := range cws {
		c := cw.GetCluster()
		if !idle[c] || cw.GetShedFraction() > 0 {
			continue
		}
		if p := previous[c]; p != nil && p.real {
			continue
		}
		row := in.RTTms[c]
		usable := func(w *schemas.EngineWeight) (float64, bool) {
			e := engines[w.GetEngineId()]
			r, ok := row[w.GetEngineId()]
			return r, ok && e != nil && e.Healthy && e.CapacityRPS > 0 && finite(e.CapacityRPS)
		}
		near := math.Inf(1)
		for _, w := range cw.GetWeights() {
			if r, ok := usable(w); ok {
				near = math.Min(near, r)
			}
		}
		var sum float64
		for _, w := range cw.GetWeights() {
			if r, ok := usable(w); ok && r < near+spillTierMs {
				sum += engines[w.GetEngineId()].CapacityRPS
			}
		}
		if !(sum > 0) || !finite(sum) {
			continue
		}
		for _, w := range cw.GetWeights() {
			if r, ok := usable(w); ok && r < near+spillTierMs {
				w.Weight = engines[w.GetEngineId()].CapacityRPS / sum
				if w.Explanation == nil {
					w.Explanation = &schemas.Explanation{}
				}
				w.Explanation.Binding = append(w.Explanation.Binding, "idle_spread")
			} else {
				w.Weight = 0
			}
		}
	}
}
