package plan

import (
	"math"
	"sort"

	opt "github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Failover split.
//
// A gateway routes on its cluster's weights; when the engines carrying
// them are lost (a region outage), until the next snapshot arrives it
// fails over locally to the remaining engines of its table in proportion
// to their weights (gateway/pick: the Maglev walk, then least loaded
// relative to weight). The control plane needs several seconds to plan
// around the loss (health checks, the processor's window and its allowed
// lateness, the optimizer period, propagation), and in that time the
// failover split is whatever the weights outside the lost region say. For
// a cluster served by its own region those are incidental: the optimizer
// puts a sliver of the traffic (often held there by the churn term) on
// the one remote engine that was cheapest at the margin and nothing on
// the others, so a region outage pours the whole cluster onto that engine
// and overloads it for the seconds until the next plan.
//
// So when a cluster sends less than spillMax of its traffic outside its
// home region (the region carrying most of its weight), the planner gives
// that share (at least spillShare) a deliberate split: where the home
// region's traffic would go if the region were lost. The split fills the
// other regions' usable engines, nearest first (engines within spillTierMs
// of each other count as equally near), each up to its planned headroom
// (MaxUtilization × capacity − planned load). In normal operation this
// moves at most spillMax of a cluster's traffic between remote engines; in
// a failover it spreads the home region's traffic where there is room for
// it. A cluster that already sends a real share elsewhere keeps the
// optimizer's split, which then is its failover split, and so does one
// with no remote headroom at all (there is nowhere to fail over to, and
// the split would only add load to saturated engines).
const (
	// spillMax: a cluster sending less than this share of its traffic
	// outside its home region gets the failover split. At 5% a cluster
	// that the (relative) churn term let send 5.6% to the nearest remote
	// engines kept that split as its failover split, and a region
	// outage then overloaded those engines for 20 s (region-outage,
	// seed 2: p99 TTFT 239 → 1410 ms); at 10% it did not.
	spillMax = 0.1
	// spillShare is the least share of a cluster's traffic the failover
	// split carries in normal operation.
	spillShare = 0.002
	// spillTierMs: remote engines whose network latencies differ by less
	// than this are filled together.
	spillTierMs = 10.0
)

type spillEngine struct {
	region  string
	cap     float64
	room    float64 // planned headroom, rps
	healthy bool
}

// spill rewrites the weights in cws outside each cluster's home region
// into the failover split (see above), except for the clusters in keep.
// region maps engine ids to regions.
func spill(in *opt.Instance, region map[string]string, keep map[string]bool, cws []*schemas.ClusterWeights) {
	engines := make(map[string]*spillEngine, len(in.Engines))
	for _, e := range in.Engines {
		engines[e.ID] = &spillEngine{region: region[e.ID], cap: e.CapacityRPS, healthy: e.Healthy}
	}
	for _, cw := range cws {
		d := cw.GetDemandRps() // weights are shares of the whole demand, shed apart
		for _, w := range cw.GetWeights() {
			if e := engines[w.GetEngineId()]; e != nil {
				e.room -= d * w.GetWeight()
			}
		}
	}
	for _, e := range engines {
		e.room = math.Max(0, e.room+in.MaxUtilization*e.cap)
		if !finite(e.room) {
			e.room = 0
		}
	}
	for _, cw := range cws {
		if !keep[cw.GetCluster()] {
			spillCluster(in, engines, cw)
		}
	}
}

func spillCluster(in *opt.Instance, engines map[string]*spillEngine, cw *schemas.ClusterWeights) {
	if cw.GetShedFraction() > 0 || !(cw.GetDemandRps() > 0) {
		return // capacity is short (nothing to fail over to), or no traffic
	}
	// The home region: the one carrying most of the cluster's weight.
	byRegion := map[string]float64{}
	for _, w := range cw.GetWeights() {
		if e := engines[w.GetEngineId()]; e != nil {
			byRegion[e.region] += w.GetWeight()
		}
	}
	home, best := "", -1.0
	for _, r := range sortedKeys(byRegion) {
		if byRegion[r] > best {
			home, best = r, byRegion[r]
		}
	}
	var out float64
	for _, w := range cw.GetWeights() {
		if e := engines[w.GetEngineId()]; e == nil || e.region != home {
			out += w.GetWeight()
		}
	}
	if out >= spillMax || best <= 0 {
		return
	}
	// The failover candidates: usable engines of other regions, nearest
	// first.
	rtt := in.RTTms[cw.GetCluster()]
	type cand struct {
		w   *schemas.EngineWeight
		e   *spillEngine
		rtt float64
	}
	var cs []cand
	for _, w := range cw.GetWeights() {
		e := engines[w.GetEngineId()]
		r, ok := rtt[w.GetEngineId()]
		if e == nil || e.region == home || !ok || !e.healthy || !(e.cap > 0) || !finite(e.cap) || !finite(r) {
			continue
		}
		cs = append(cs, cand{w, e, r})
	}
	if len(cs) == 0 {
		return
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].rtt < cs[j].rtt })
	// Fill with the home region's traffic, tier by tier, up to headroom
	// (what does not fit has nowhere good to go: it does not count).
	alloc := make([]float64, len(cs))
	left := best * cw.GetDemandRps()
	for i := 0; i < len(cs) && left > 0; {
		j, room := i, 0.0
		for ; j < len(cs) && cs[j].rtt < cs[i].rtt+spillTierMs; j++ {
			room += cs[j].e.room
		}
		if take := math.Min(left, room); take > 0 {
			for k := i; k < j; k++ {
				alloc[k] += take * cs[k].e.room / room
			}
			left -= take
		}
		i = j
	}
	var sum float64
	for _, a := range alloc {
		sum += a
	}
	if !(sum > 0) || !finite(sum) {
		return
	}
	share := math.Max(out, spillShare)
	scale := (1 - share) / best
	for _, w := range cw.GetWeights() {
		if e := engines[w.GetEngineId()]; e != nil && e.region == home {
			w.Weight *= scale
		} else {
			w.Weight = 0
		}
	}
	for k, c := range cs {
		c.w.Weight = share * alloc[k] / sum
		if c.w.Weight > 0 {
			// Explain it: this weight is the failover split, not the
			// optimizer's margin.
			if c.w.Explanation == nil {
				c.w.Explanation = &schemas.Explanation{}
			}
			c.w.Explanation.Binding = append(c.w.Explanation.Binding, "failover_split")
		}
	}
}
