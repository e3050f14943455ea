package plan

import (
	"math"

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
// the engine longer ago).
func explainCapacity(engines map[string]*schemas.EngineEstimate, capacity map[string]*capacityState, clusters []*schemas.ClusterWeights) {
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
			}
		}
	}
}
