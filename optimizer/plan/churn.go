package plan

import (
	"math"
	"time"

	opt "github.com/switchyard-llm/switchyard/optimizer"
)

// The churn term, relative to the latencies at stake.
//
// The optimizer charges ChurnWeight ms for every rps moved away from or
// onto an engine relative to the previous weights, so moving δ rps from
// engine A to engine B costs 2·ChurnWeight·δ and pays off only while B's
// marginal latency is more than 2·ChurnWeight below A's. An absolute
// weight therefore means different things on different fleets: 500 ms
// per rps needs a second of marginal-latency gap before anything moves on
// engines that answer in ~100 ms (weights freeze), and is only a tenth of
// the latency on engines that take seconds (weights chase noise).
//
// The planner sets each instance's churn weight to κ × L̄, where L̄ is the
// demand-weighted mean expected end-to-end latency (network + engine at
// its load, utilisation capped at MaxUtilization) of the previous weights
// under the current estimates, and κ = Settings.ChurnRelative. Traffic
// then moves while the marginal-latency gap between two engines exceeds
// 2κ of the latency at stake, whatever its scale. With κ = 0.1 (the
// default): two equal engines whose estimates differ by measurement noise
// of ±5% (a gap of at most 10% < 2κ) do not move weight; a 30% gap (engines
// at L and 1.3·L, L̄ ≈ 1.15·L, threshold 2κL̄ ≈ 0.23·L) moves it in the
// first window in which it is seen (TestRelativeChurn). κ must stay in
// about (0.05, 0.13) for both to hold. Measured with `switchyard sim`
// (docs/optimizer.md): 0.08 let a region outage pour a cluster's failover
// onto one engine (with spillMax at 5%), 0.3–0.5 cut reversals further on
// the long-prompt traces but no longer moves on a 30% gap.
//
// The previous weights are the churn reference only when they were made
// from the fleet the cluster can use now: a cluster with a usable engine
// (healthy, reachable) that it could not use when its previous weights
// were made, or a cluster new to the plan (then every cluster: its demand
// was not in anybody's plan), is planned without a churn reference, so a
// plan made from a partial view of the fleet (an agent that started
// publishing late, an engine back from a restart) is not locked in.
// Previous weights older than EstimateTTL are no reference either.

// DefaultChurnRelative is κ above.
const DefaultChurnRelative = 0.1

// churnReference returns the previous weights that may serve as the churn
// reference of in (see above), or nil.
func (s *State) churnReference(in *opt.Instance, now time.Time, set Settings) map[string]map[string]float64 {
	if len(s.previous) == 0 {
		return nil
	}
	for _, c := range in.Clusters {
		if s.previous[c.ID] == nil {
			return nil // a cluster new to the plan: no plan had its demand
		}
	}
	inst := make(map[string]bool, len(in.Engines))
	for _, e := range in.Engines {
		inst[e.ID] = true
	}
	cutoff := now.Add(-set.EstimateTTL).UnixMilli()
	out := map[string]map[string]float64{}
	for _, c := range in.Clusters {
		p := s.previous[c.ID]
		if p.createdMs < cutoff || partialView(in, c.ID, p) {
			continue
		}
		row := map[string]float64{}
		for e, w := range p.weights {
			if inst[e] {
				row[e] = w
			}
		}
		out[c.ID] = row
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// partialView reports whether cluster c can use an engine now that it could
// not use when p was made.
func partialView(in *opt.Instance, c string, p *previousPlan) bool {
	row := in.RTTms[c]
	for _, e := range in.Engines {
		if _, ok := row[e.ID]; ok && e.Healthy && !p.usable[e.ID] {
			return true
		}
	}
	return false
}

// churnWeight is the churn weight of in under set (see above).
func churnWeight(in *opt.Instance, set Settings) float64 {
	switch {
	case set.ChurnWeight > 0:
		return set.ChurnWeight
	case set.ChurnWeight < 0 || set.ChurnRelative < 0 || len(in.Previous) == 0:
		return 0
	}
	l := previousLatency(in)
	if !finite(l) || l <= 0 {
		return 0
	}
	return math.Min(set.ChurnRelative*l, opt.MaxValue)
}

// previousLatency is L̄ above: the demand-weighted mean expected latency of
// in.Previous (each cluster's weights on the engines it can use now,
// renormalised) under in's estimates; 0 when there is nothing to weigh.
func previousLatency(in *opt.Instance) float64 {
	engines := make(map[string]*opt.Engine, len(in.Engines))
	for i := range in.Engines {
		if e := &in.Engines[i]; e.Healthy && e.CapacityRPS > 0 {
			engines[e.ID] = e
		}
	}
	type flow struct {
		engine string
		rps    float64
		rtt    float64
	}
	var flows []flow
	load := map[string]float64{}
	for _, c := range in.Clusters {
		prev, row := in.Previous[c.ID], in.RTTms[c.ID]
		var sum float64
		for _, id := range sortedKeys(prev) {
			if _, ok := row[id]; ok && engines[id] != nil {
				sum += prev[id]
			}
		}
		if !(sum > 0) {
			continue
		}
		for _, id := range sortedKeys(prev) {
			if r, ok := row[id]; ok && engines[id] != nil && prev[id] > 0 {
				x := c.DemandRPS * prev[id] / sum
				flows = append(flows, flow{id, x, r})
				load[id] += x
			}
		}
	}
	var num, den float64
	for _, f := range flows {
		e := engines[f.engine]
		u := math.Min(load[f.engine]/e.CapacityRPS, in.MaxUtilization)
		num += float64(f.rps * (f.rtt + interp(e.LatencyMs, u)))
		den += f.rps
	}
	if !(den > 0) {
		return 0
	}
	return num / den
}
