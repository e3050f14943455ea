package scenario

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestFleetScenarioCarriesTheEstimates: the twin's scenario has each
// engine's preset, batch limit, KV blocks and latency multiplier from its
// estimates, and each region pair's measured RTT.
func TestFleetScenarioCarriesTheEstimates(t *testing.T) {
	end := time.UnixMilli(1_000_000)
	eng := func(id, region, gpu string, batch uint32, tbot0 float64) *schemas.Estimate {
		return &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{
			EngineId: id, Region: region, GpuClass: gpu, WindowEndUnixMs: end.UnixMilli(), ReadyReplicas: 1,
			MaxBatch: batch, CapacitySource: "engine_metrics", KvCapacityTokens: 16 * 1000,
			TbotProfile: &schemas.LatencyProfile{Samples: 100, Points: []*schemas.ProfilePoint{{Utilization: 0, LatencyMs: tbot0}, {Utilization: 1, LatencyMs: 3 * tbot0}}},
		}}}
	}
	net := func(c, e string, ms float64) *schemas.Estimate {
		return &schemas.Estimate{Kind: &schemas.Estimate_Network{Network: &schemas.NetworkEstimate{Cluster: c, EngineId: e, RttMs: ms, Samples: 50, WindowEndUnixMs: end.UnixMilli()}}}
	}
	ests := []*schemas.Estimate{
		eng("fast", "r1", "h100", 16, 13), eng("slow", "r1", "h100", 16, 78), eng("far", "r2", "a100", 128, 20),
		net("r1", "fast", 1), net("r1", "far", 40), net("r2", "far", 1),
		{Kind: &schemas.Estimate_Demand{Demand: &schemas.DemandEstimate{Cluster: "r1", DemandRps: 3, WindowEndUnixMs: end.UnixMilli()}}},
	}
	f, err := FleetFromEstimates(ests, end.Add(-time.Minute), end)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := f.Scenario("trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Engine{}
	for _, e := range sc.Engines {
		by[e.ID] = e
	}
	if e := by["fast"]; e.MaxSeqs != 16 || e.KVBlocks != 1000 || e.LatencyMultiplier != 0 {
		t.Errorf("fast: %+v", e)
	}
	if e := by["slow"]; e.LatencyMultiplier < 5 || e.LatencyMultiplier > 7 {
		t.Errorf("slow: latency multiplier %v, want about 6", e.LatencyMultiplier)
	}
	if e := by["far"]; e.MaxSeqs != 0 || e.GPU != "a100" {
		t.Errorf("far: %+v", e)
	}
	if got := sc.RTT("r1", "r2"); got != 40*time.Millisecond {
		t.Errorf("rtt r1-r2 = %v, want 40ms", got)
	}
	if len(sc.Clusters) != 2 || sc.Clusters[0].Region != "r1" || sc.Clusters[1].Region != "r2" {
		t.Errorf("clusters %+v", sc.Clusters)
	}
}

// TestFleetScrapesAsTheAgentsDid: the twin's agents scrape as often as the
// live ones did, read from the estimates' signal counts (the median
// window: an engine's first, partial window counts fewer), so it sees the
// queues live scrapes saw.
func TestFleetScrapesAsTheAgentsDid(t *testing.T) {
	end := time.UnixMilli(1_000_000)
	var ests []*schemas.Estimate
	for w, signals := range []uint32{4, 15, 15, 16, 15} { // 30-s windows, scrapes every 2 s
		e := end.Add(time.Duration(w-4) * 10 * time.Second).UnixMilli()
		ests = append(ests, &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{
			EngineId: "e", Region: "r", GpuClass: "h100", ReadyReplicas: 1, WindowStartUnixMs: e - 30_000, WindowEndUnixMs: e, SignalCount: signals,
		}}})
	}
	ests = append(ests, &schemas.Estimate{Kind: &schemas.Estimate_Demand{Demand: &schemas.DemandEstimate{Cluster: "r", DemandRps: 3, WindowEndUnixMs: end.UnixMilli()}}})
	f, err := FleetFromEstimates(ests, end.Add(-time.Minute), end)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Control.SignalIntervalS; got != 2 {
		t.Fatalf("signal interval %v s, want 2", got)
	}
	sc, err := f.Scenario("trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Control.SignalIntervalS; got != 2 {
		t.Fatalf("scenario's signal interval %v s, want 2", got)
	}
}
