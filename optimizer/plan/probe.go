package plan

import (
	"math"
	"sort"

	opt "github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/schemas"
)

// Probe floors.
//
// An engine the plan gives no traffic produces no samples, so its
// estimate never changes: an engine killed and restarted came back with
// weight 0 and got no request for a minute, and an engine that looked slow
// once keeps looking slow. So every healthy engine gets a small floor on
// its weight from one cluster, its prober: the cluster nearest to it
// (lowest network latency, then lowest id; in.Clusters is sorted). The
// floor is
//
//	min(ProbeShare, ProbeRPS / D)
//
// of the prober's traffic (D its demand): at most 2% by default and at
// most ProbeRPS (1 rps, ~10 requests per 10 s window: enough samples to
// keep a profile measured). It is bounded:
//
//   - only an engine whose expected latency for the prober (network
//     latency + its profile at its planned load) is at most
//     probeMaxRatio × the prober's expected latency gets one, so a
//     remembered slow engine is not probed until its memory expires
//     (outliers.go) and the probed traffic costs at most
//     (probeMaxRatio − 1) × floor of the cluster's mean latency;
//   - within the engine's planned headroom (MaxUtilization × capacity −
//     planned load);
//   - all floors of one cluster together take at most probeMaxTotal of
//     its traffic, from its other engines in proportion to their weights.
//
// The floor applies whether or not the engine has recent samples, so it
// does not switch on and off as samples come and go (which would count as
// weight reversals); an engine the optimizer already gives more keeps its
// weight. A restarted engine is usable again in the first plan that sees
// it healthy, and its churn reference is reset then (churn.go), so it
// serves again within two windows.
const (
	// DefaultProbeShare is Settings.ProbeShare's default.
	DefaultProbeShare = 0.02
	// ProbeRPS caps a probe floor's traffic.
	ProbeRPS = 1.0
	// probeMaxTotal caps the floors of one cluster together.
	probeMaxTotal = 0.1
	// probeMaxRatio bounds a probed engine's expected latency relative to
	// its prober's.
	probeMaxRatio = 2.0
)

// probe raises the weights of the clusters' probe floors (see above).
func probe(in *opt.Instance, set Settings, cws []*schemas.ClusterWeights) {
	if set.ProbeShare <= 0 {
		return
	}
	share := math.Min(set.ProbeShare, 1)
	byID := make(map[string]*schemas.ClusterWeights, len(cws))
	load := map[string]float64{}
	for _, cw := range cws {
		byID[cw.GetCluster()] = cw
		for _, w := range cw.GetWeights() {
			load[w.GetEngineId()] += cw.GetDemandRps() * w.GetWeight()
		}
	}
	type floor struct {
		engine string
		w      float64
	}
	floors := map[string][]floor{}
	for i := range in.Engines {
		e := &in.Engines[i]
		if !e.Healthy || !(e.CapacityRPS > 0) || !finite(e.CapacityRPS) {
			continue
		}
		// The prober: the nearest cluster (then the lowest id), whatever
		// its demand, so floors do not move between clusters as demand
		// comes and goes.
		var prober *schemas.ClusterWeights
		var pr float64
		for _, c := range in.Clusters {
			cw := byID[c.ID]
			if r, ok := in.RTTms[c.ID][e.ID]; ok && cw != nil && (prober == nil || r < pr) {
				prober, pr = cw, r
			}
		}
		d := prober.GetDemandRps()
		if prober == nil || !(d > 0) || prober.GetShedFraction() > 0 || !(prober.GetExpectedLatencyMs() > 0) {
			continue
		}
		f := math.Min(share, ProbeRPS/d)
		f = math.Min(f, (in.MaxUtilization*e.CapacityRPS-load[e.ID])/d)
		u := load[e.ID] / e.CapacityRPS
		if pr+interp(e.LatencyMs, u) > probeMaxRatio*prober.GetExpectedLatencyMs() || !(f > 0) {
			continue
		}
		floors[prober.GetCluster()] = append(floors[prober.GetCluster()], floor{e.ID, f})
	}
	for _, c := range sortedKeys(floors) {
		cw := byID[c]
		fs := floors[c]
		sort.Slice(fs, func(i, j int) bool { return fs[i].engine < fs[j].engine })
		want := map[string]float64{}
		var add float64
		for _, f := range fs {
			want[f.engine] = f.w
		}
		var others float64
		for _, w := range cw.GetWeights() {
			if f, ok := want[w.GetEngineId()]; ok && w.GetWeight() < f {
				add += f - w.GetWeight()
			} else {
				others += w.GetWeight()
			}
		}
		if !(add > 0) {
			continue
		}
		scale := 1.0
		if add > probeMaxTotal {
			scale = probeMaxTotal / add
			add = probeMaxTotal
		}
		if others <= add {
			continue
		}
		k := (others - add) / others
		for _, w := range cw.GetWeights() {
			if f, ok := want[w.GetEngineId()]; ok && w.GetWeight() < f {
				w.Weight += scale * (f - w.GetWeight())
				if w.Explanation == nil {
					w.Explanation = &schemas.Explanation{}
				}
				w.Explanation.Binding = append(w.Explanation.Binding, "probe")
			} else {
				w.Weight *= k
			}
		}
	}
}
