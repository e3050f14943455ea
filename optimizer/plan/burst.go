package plan

import (
	"math"

	opt "github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Bursts above capacity.
//
// A window's demand above the fleet's capacity is either a burst, which
// the gateways' admission queues absorb and drain once it passes, or a
// sustained excess, which no queue can hold and which the plan sheds
// explicitly, max-min fair between clusters. Shedding every window's
// excess refused requests the fleet served seconds later: a trace
// replayed at 0.9x its fleet's capacity has bursts above it lasting
// 20-30 s, and the plan shed 1-7 of 800 requests in them while nginx
// least_conn, which has no shed, served all of them (bench/live).
//
// So the plan sheds only the excess of the sustained demand, each
// cluster's demand smoothed over sustainMs (an exponential average over
// its windows, in window order), over the capacity: the demand it plans
// for is min(demand, max(capacity, sustained demand)), scaled over the
// clusters in proportion to their demand. A fleet at 1.1x its capacity
// from 0.9x sheds after about 0.7 × sustainMs.
const sustainMs = 60_000

// sustainedDemand is one cluster's demand smoothed over sustainMs.
type sustainedDemand struct {
	rps float64
	end int64 // window end of the last estimate folded in
}

// sustainDemand folds d into its cluster's sustained demand; a window not
// newer than the last one folded in is ignored, so the state is a
// function of the sequence of windows.
func (s *State) sustainDemand(d *schemas.DemandEstimate) {
	rps, ok := plannedDemand(d)
	if !ok {
		return
	}
	cur := s.sustained[d.GetCluster()]
	switch {
	case cur == nil:
		s.sustained[d.GetCluster()] = &sustainedDemand{rps: rps, end: d.GetWindowEndUnixMs()}
	case d.GetWindowEndUnixMs() > cur.end:
		a := 1 - math.Exp(-float64(d.GetWindowEndUnixMs()-cur.end)/sustainMs)
		cur.rps += a * (rps - cur.rps)
		cur.end = d.GetWindowEndUnixMs()
	}
}

// burstAbsorbed is the total demand the plan is made for, given the
// clusters' total demand and the fleet's capacity: total while it fits,
// else no more than the larger of the capacity and the clusters'
// sustained demand (those with a fresh estimate, at least their planned
// demand's floor otherwise).
func (s *State) burstAbsorbed(clusters []opt.Cluster, total, capacity float64, cutoff int64) float64 {
	if !(capacity > 0) || !(total > capacity) {
		return total
	}
	var sustained float64
	for _, c := range clusters {
		if d := s.sustained[c.ID]; d != nil && d.end >= cutoff {
			sustained += math.Min(d.rps, c.DemandRPS)
		} else {
			sustained += c.DemandRPS
		}
	}
	return math.Min(total, math.Max(capacity, sustained))
}

// plannedDemand is the rate a demand estimate asks the plan for: the
// larger of its window's rate and its forecast, at most opt.MaxValue (one
// absurd estimate must not fail the whole plan); false when it is not a
// finite, non-negative rate.
func plannedDemand(d *schemas.DemandEstimate) (float64, bool) {
	rps := math.Max(d.GetDemandRps(), d.GetForecastRps())
	if !finite(rps) || rps < 0 {
		return 0, false
	}
	return math.Min(rps, opt.MaxValue), true
}
