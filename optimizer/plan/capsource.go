package plan

import (
	"math"
	"slices"

	"github.com/switchyard-llm/switchyard/schemas"
)

// explainCapacity copies each engine's batch limit and where it came from
// (EngineEstimate.max_batch, capacity_source) from its latest estimate
// into the snapshot's explanations, for `switchyard explain`, and the
// engine's concurrency limit when a batch limit rests on evidence (the
// remembered one, capacityState.batch; the gateways' pickers count
// requests beyond it as waiting for a slot), and its prefix-cache
// residency as tracked across windows (capacityState.residency, from
// EngineEstimate.cache_residency_s; the pickers credit no prefix sent to
// the engine longer ago). An engine whose own limit has not shown gets
// its GPU class peers' (classBatch).
func explainCapacity(engines map[string]*schemas.EngineEstimate, capacity map[string]*capacityState, clusters []*schemas.ClusterWeights) {
	peer := classBatch(engines, capacity)
	for _, cw := range clusters {
		for _, w := range cw.GetWeights() {
			e := engines[w.GetEngineId()]
			if r := capacity[w.GetEngineId()].residency(); r > 0 && !math.IsInf(r, 1) {
				if w.Explanation == nil {
					w.Explanation = &schemas.Explanation{}
				}
				w.Explanation.CacheResidencyS = r
			}
			if e.GetMaxBatch() == 0 && e.GetCapacitySource() == "" {
				continue
			}
			if w.Explanation == nil {
				w.Explanation = &schemas.Explanation{}
			}
			w.Explanation.MaxBatch, w.Explanation.CapacitySource = e.GetMaxBatch(), e.GetCapacitySource()
			if cs := capacity[w.GetEngineId()]; cs != nil && cs.batch > 0 {
				w.Explanation.MaxConcurrency = cs.batch * max(e.GetReadyReplicas(), 1)
			} else if b := peer[e.GetGpuClass()]; b > 0 {
				w.Explanation.MaxConcurrency = b * max(e.GetReadyReplicas(), 1)
			}
		}
	}
}

// classBatch returns, per GPU class, the median of the evidence-based
// batch limits its engines have shown (capacityState.batch). Engines of
// one class usually run one serving configuration, and an engine's own
// limit shows only in a window where requests waited there (an engine
// that never saturates never shows it), so until it shows its own an
// engine's explanation gives its class peers' as its concurrency limit:
// the gateways then count requests beyond it as waiting for a slot
// rather than piling onto it. Its capacity is not changed.
func classBatch(engines map[string]*schemas.EngineEstimate, capacity map[string]*capacityState) map[string]uint32 {
	by := map[string][]uint32{}
	for id, e := range engines {
		if cs := capacity[id]; cs != nil && cs.batch > 0 && e.GetGpuClass() != "" {
			by[e.GetGpuClass()] = append(by[e.GetGpuClass()], cs.batch)
		}
	}
	out := make(map[string]uint32, len(by))
	for c, bs := range by {
		slices.Sort(bs)
		out[c] = bs[(len(bs)-1)/2]
	}
	return out
}
