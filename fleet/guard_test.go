package fleet

import (
	"testing"

	"github.com/switchyard-llm/switchyard/schemas"
)

func est(id string, end int64, capRPS, ttftMs float64, batch, ready uint32) *schemas.Estimate {
	return &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{
		EngineId: id, EndpointUrl: "http://" + id, WindowStartUnixMs: end - 30000, WindowEndUnixMs: end,
		CapacityRps: capRPS, MaxBatch: batch, ReadyReplicas: ready, Health: schemas.Health_HEALTH_HEALTHY,
		TtftProfile: &schemas.LatencyProfile{Points: []*schemas.ProfilePoint{{Utilization: 0, LatencyMs: ttftMs}, {Utilization: 1, LatencyMs: 4 * ttftMs}}},
	}}}
}

func netEst(id string, end int64, samples uint32) *schemas.Estimate {
	return &schemas.Estimate{Kind: &schemas.Estimate_Network{Network: &schemas.NetworkEstimate{
		Cluster: "us", EngineId: id, WindowEndUnixMs: end, RttMs: 5, Samples: samples}}}
}

// TestGuard: each step is one window of estimates for engine e1
// (baseline 10 rps, 100 ms), in order; the planned capacity says
// whether the claim moved the plan. A claim gateways confirm (they saw
// the engine serve half the claimed rate) is taken; an unconfirmed one
// is replaced by the last trusted estimate until a plausible one comes.
func TestGuard(t *testing.T) {
	reg, err := New(Engine{ID: "e1", URL: "http://e1", MaxBatch: 64, MaxReplicas: 4})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGuard(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		ests    []*schemas.Estimate
		planned float64 // capacity planned for e1; 0: not planned
		kind    Kind
	}{
		{"warm-up 1", []*schemas.Estimate{est("e1", 1, 5, 100, 64, 1)}, 5, 0},
		{"warm-up 2", []*schemas.Estimate{est("e1", 2, 10, 100, 64, 1)}, 10, 0},
		{"warm-up 3", []*schemas.Estimate{est("e1", 3, 9, 100, 64, 1)}, 9, 0},
		{"within gain", []*schemas.Estimate{est("e1", 4, 19, 60, 64, 1)}, 19, 0},
		{"huge", []*schemas.Estimate{est("e1", 5, 1000, 60, 64, 1)}, 19, Quarantined},
		{"instant", []*schemas.Estimate{est("e1", 6, 10, 1, 64, 1)}, 19, Quarantined},
		{"batch above registry", []*schemas.Estimate{est("e1", 7, 10, 100, 100000, 1)}, 19, Quarantined},
		{"replicas above registry", []*schemas.Estimate{est("e1", 8, 10, 100, 64, 50)}, 19, Quarantined},
		{"plausible again", []*schemas.Estimate{est("e1", 9, 12, 100, 64, 1)}, 12, Confirmed},
		{"confirmed by gateways", []*schemas.Estimate{est("e1", 10, 40, 100, 64, 2), netEst("e1", 10, 600)}, 40, 0},
		{"fake engine", []*schemas.Estimate{est("e9", 11, 1000, 1, 1, 1), netEst("e9", 11, 600)}, 0, Rejected},
	}
	for _, s := range steps {
		out, vs := g.Filter(s.ests)
		planned := 0.0
		for _, e := range out {
			if en := e.GetEngine(); en.GetEngineId() == "e1" {
				planned = en.GetCapacityRps()
				if en.GetWindowEndUnixMs() != s.ests[0].GetEngine().GetWindowEndUnixMs() {
					t.Errorf("%s: planned estimate dated %d", s.name, en.GetWindowEndUnixMs())
				}
			}
			if e.GetEngine().GetEngineId() == "e9" || e.GetNetwork().GetEngineId() == "e9" {
				t.Errorf("%s: e9 passed", s.name)
			}
		}
		if planned != s.planned {
			t.Errorf("%s: planned capacity %v, want %v", s.name, planned, s.planned)
		}
		var kind Kind
		if len(vs) > 0 {
			kind = vs[0].Kind
		}
		if kind != s.kind {
			t.Errorf("%s: verdict %+v, want kind %v", s.name, vs, s.kind)
		}
	}
}
