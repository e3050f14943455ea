package optimizer_test

import (
	"slices"
	"testing"

	"github.com/switchyard-llm/switchyard/optimizer"
)

// TestChurnLabelsTrafficPricedAboveTheCluster: with a churn term, a
// cluster whose traffic moved off its previous engine keeps some on an
// engine dearer at the margin than its cheapest; that engine's binding
// names churn, and every engine with traffic priced above the cluster's
// lowest marginal latency names a constraint (the footer of explain
// relies on it).
func TestChurnLabelsTrafficPricedAboveTheCluster(t *testing.T) {
	in := loadInstance(t, "testdata/region-bc.json")
	in.Clusters[0].DemandRPS, in.Clusters[1].DemandRPS = 110, 50
	in.ChurnWeight = 50
	sol, err := optimizer.Solve(in)
	if err != nil {
		t.Fatal(err)
	}
	labelled := 0
	for c, exs := range sol.Explanations {
		low := 1e300
		for _, ex := range exs {
			if ex.Weight > 0 {
				low = min(low, ex.MarginalMs)
			}
		}
		for _, ex := range exs {
			if ex.Weight > 0 && ex.MarginalMs > low+optimizer.PriceTolerance(low) {
				if len(ex.Binding) == 0 {
					t.Errorf("%s/%s: marginal %.1f above the cluster's %.1f with no binding constraint", c, ex.Engine, ex.MarginalMs, low)
				}
				if slices.Contains(ex.Binding, "churn") {
					labelled++
				}
			}
		}
	}
	if labelled == 0 {
		t.Fatalf("no engine priced above its cluster's lowest marginal names churn: %+v", sol.Explanations)
	}
}
