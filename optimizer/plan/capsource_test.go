package plan

import (
	"math"
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

// TestCacheResidencyExplained: each engine's explanation carries its
// cache residency as tracked across windows (the first window's, then
// its turnover rate 1/residency moving residencyGain toward each newer
// window's), also when its batch limit is unknown; an engine without one
// (0: unknown) gets none, and a restart starts it over.
func TestCacheResidencyExplained(t *testing.T) {
	s := NewState()
	for _, e := range []*schemas.EngineEstimate{
		{EngineId: "a", WindowEndUnixMs: 1000, CacheResidencyS: 300, CapacityRps: 10, ReadyReplicas: 1},
		{EngineId: "a", WindowEndUnixMs: 2000, CacheResidencyS: 42.5, KvCapacityTokens: 1 << 20, CapacityRps: 10, ReadyReplicas: 1},
		{EngineId: "b", WindowEndUnixMs: 2000, MaxBatch: 16, CapacitySource: "configured", CapacityRps: 10},
	} {
		s.Apply(&schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: e}})
	}
	cws := []*schemas.ClusterWeights{{Cluster: "c", Weights: []*schemas.EngineWeight{{EngineId: "a", Weight: 0.5}, {EngineId: "b", Weight: 0.5}}}}
	explainCapacity(s.engines, s.capacity, cws)
	a, b := cws[0].GetWeights()[0].GetExplanation(), cws[0].GetWeights()[1].GetExplanation()
	want := 1 / (1.0/300 + residencyGain*(1/42.5-1.0/300)) // about 230 s
	if r := a.GetCacheResidencyS(); math.Abs(r-want) > 1e-9*want || a.GetMaxBatch() != 0 {
		t.Fatalf("engine a: residency %v s, max batch %d; want %v s, 0", r, a.GetMaxBatch(), want)
	}
	if b.GetCacheResidencyS() != 0 || b.GetMaxBatch() != 16 {
		t.Fatalf("engine b: residency %v s, max batch %d; want 0 s, 16", b.GetCacheResidencyS(), b.GetMaxBatch())
	}
	// Down, then back with a cold cache: the next window's residency alone.
	for _, e := range []*schemas.EngineEstimate{
		{EngineId: "a", WindowEndUnixMs: 3000, CacheResidencyS: 42.5, CapacityRps: 10, Health: schemas.Health_HEALTH_UNHEALTHY},
		{EngineId: "a", WindowEndUnixMs: 4000, CacheResidencyS: 90, CapacityRps: 10, ReadyReplicas: 1},
	} {
		s.Apply(&schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: e}})
	}
	cws = []*schemas.ClusterWeights{{Cluster: "c", Weights: []*schemas.EngineWeight{{EngineId: "a", Weight: 1}}}}
	explainCapacity(s.engines, s.capacity, cws)
	if r := cws[0].GetWeights()[0].GetExplanation().GetCacheResidencyS(); math.Abs(r-90) > 1e-9 {
		t.Fatalf("after a restart: residency %v s, want 90", r)
	}
}

// TestClassPeersLimitUntilOwnShows: an engine whose batch limit never
// showed (it never had requests waiting) gets the median of its GPU class
// peers' evidence-based limits as its concurrency limit; its own limit,
// once shown, wins; another class's engine gets nothing.
func TestClassPeersLimitUntilOwnShows(t *testing.T) {
	s := NewState()
	apply := func(id, class string, end int64, batch uint32, src string) {
		s.Apply(&schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{EngineId: id, GpuClass: class,
			WindowEndUnixMs: end, MaxBatch: batch, CapacitySource: src, ReadyReplicas: 2, CapacityRps: 10, ObservedRps: 5}}})
	}
	limits := func() map[string]uint32 {
		cws := []*schemas.ClusterWeights{{Cluster: "c", Weights: []*schemas.EngineWeight{
			{EngineId: "a", Weight: 0.25}, {EngineId: "b", Weight: 0.25}, {EngineId: "c", Weight: 0.25}, {EngineId: "d", Weight: 0.25}}}}
		explainCapacity(s.engines, s.capacity, cws)
		out := map[string]uint32{}
		for _, w := range cws[0].GetWeights() {
			out[w.GetEngineId()] = w.GetExplanation().GetMaxConcurrency()
		}
		return out
	}
	apply("a", "h100", 1000, 256, "prior")
	apply("b", "h100", 1000, 256, "prior")
	apply("c", "h100", 1000, 256, "prior")
	apply("d", "l4", 1000, 256, "prior")
	if got := limits(); got["a"]+got["b"]+got["c"]+got["d"] != 0 {
		t.Fatalf("priors only: %v, want no limits", got)
	}
	apply("a", "h100", 2000, 16, "inferred")
	apply("b", "h100", 2000, 256, "prior")
	apply("c", "h100", 2000, 256, "prior")
	if got := limits(); got["a"] != 32 || got["b"] != 32 || got["c"] != 32 || got["d"] != 0 {
		t.Fatalf("a inferred 16: %v, want a, b, c 32 (16 x 2 replicas), d 0", got)
	}
	apply("b", "h100", 3000, 24, "engine_metrics")
	if got := limits(); got["a"] != 32 || got["b"] != 48 || got["c"] != 32 {
		t.Fatalf("b shows 24: %v, want a 32, b 48, c the peers' median 16 x 2 = 32", got)
	}
}
