package plan

import (
	"slices"
	"testing"

	opt "github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/schemas"
)

// TestHoldNamesItselfInBinding: a cluster hold keeps at its previous
// weights says so in each used engine's binding ("hold", which explain
// documents), in place of the solver's "zero"/"churn" it discarded.
func TestHoldNamesItselfInBinding(t *testing.T) {
	in := &opt.Instance{MaxUtilization: 0.9,
		Engines:  []opt.Engine{{ID: "a", CapacityRPS: 100, Healthy: true}, {ID: "b", CapacityRPS: 100, Healthy: true}},
		Previous: map[string]map[string]float64{"c": {"a": 0.5, "b": 0.5}}}
	cws := []*schemas.ClusterWeights{{Cluster: "c", DemandRps: 10, Weights: []*schemas.EngineWeight{
		{EngineId: "a", Weight: 0.55, Explanation: &schemas.Explanation{}},
		{EngineId: "b", Weight: 0.45, Explanation: &schemas.Explanation{Binding: []string{"churn"}}},
	}}}
	if held := hold(in, 0.1, cws); !held["c"] {
		t.Fatalf("cluster not held: %v", held)
	}
	for _, w := range cws[0].GetWeights() {
		if w.GetWeight() != 0.5 {
			t.Errorf("%s: weight %v, want the previous 0.5", w.GetEngineId(), w.GetWeight())
		}
		if b := w.GetExplanation().GetBinding(); !slices.Equal(b, []string{"hold"}) {
			t.Errorf("%s: binding %v, want [hold]", w.GetEngineId(), b)
		}
	}
}
