package plan

import (
	"testing"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestMaxConcurrencyFromRememberedEvidence: a batch limit inferred in one
// window (16 per replica, 2 replicas) is published as the engine's
// concurrency limit (32) in later windows whose estimates fall back to the
// class prior; the prior alone never sets one, and a restart drops it.
func TestMaxConcurrencyFromRememberedEvidence(t *testing.T) {
	est := func(end int64, batch uint32, src string, health schemas.Health) *schemas.EngineEstimate {
		return &schemas.EngineEstimate{EngineId: "e", WindowEndUnixMs: end, MaxBatch: batch, CapacitySource: src,
			ReadyReplicas: 2, Health: health, CapacityRps: 10, ObservedRps: 5}
	}
	limit := func(s *State) uint32 {
		cws := []*schemas.ClusterWeights{{Cluster: "c", Weights: []*schemas.EngineWeight{{EngineId: "e", Weight: 1}}}}
		explainCapacity(s.engines, s.capacity, cws)
		return cws[0].GetWeights()[0].GetExplanation().GetMaxConcurrency()
	}
	s := NewState()
	apply := func(e *schemas.EngineEstimate) { s.Apply(&schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: e}}) }
	apply(est(1000, 256, "prior", schemas.Health_HEALTH_HEALTHY))
	if got := limit(s); got != 0 {
		t.Fatalf("prior alone: concurrency %d, want 0", got)
	}
	apply(est(2000, 16, "inferred", schemas.Health_HEALTH_HEALTHY))
	apply(est(3000, 256, "prior", schemas.Health_HEALTH_HEALTHY))
	if got := limit(s); got != 32 {
		t.Fatalf("after an inferred limit: concurrency %d, want 32", got)
	}
	apply(est(4000, 256, "prior", schemas.Health_HEALTH_UNHEALTHY))
	apply(est(5000, 256, "prior", schemas.Health_HEALTH_HEALTHY))
	if got := limit(s); got != 0 {
		t.Fatalf("after a restart: concurrency %d, want 0", got)
	}
}
