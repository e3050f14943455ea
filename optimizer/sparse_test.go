package optimizer_test

import (
	"testing"

	"github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/optimizer/synth"
)

// TestSparseInstanceSolves solves small instances of the internet-size
// shape (each cluster allowed only the engines of its K nearest of 10
// regions) to the tolerance. Before the Newton hot start the 20x1000 one
// ended at a gap of 1.3e-2 after 144 iterations (the first temperature
// stage stalled).
func TestSparseInstanceSolves(t *testing.T) {
	for _, cfg := range []synth.Sparse{
		{Clusters: 20, Engines: 1000, Regions: 10, K: 3, Seed: 1},
		{Clusters: 20, Engines: 1000, Regions: 10, K: 1, Seed: 2},
		{Clusters: 30, Engines: 600, Regions: 10, K: 2, Seed: 3, Load: 0.9},
	} {
		in := synth.SparseInstance(cfg)
		pairs := 0
		for _, c := range in.Clusters {
			row := in.RTTms[c.ID]
			if len(row) == 0 || len(row) > cfg.Engines*2*cfg.K/cfg.Regions {
				t.Fatalf("%+v: cluster %s allowed %d engines, want about K/Regions of %d", cfg, c.ID, len(row), cfg.Engines)
			}
			pairs += len(row)
		}
		sol, err := optimizer.Solve(in, optimizer.Tolerance(1e-3))
		if err != nil {
			t.Fatal(err)
		}
		if sol.DualityGap > 1e-3 {
			t.Errorf("%+v (%d pairs): gap %.3g after %d iterations, want <= 1e-3", cfg, pairs, sol.DualityGap, sol.Iterations)
		}
		for cid, w := range sol.Weights {
			for eid := range w {
				if _, ok := in.RTTms[cid][eid]; !ok && w[eid] > 0 {
					t.Errorf("%+v: cluster %s routed to %s outside its regions", cfg, cid, eid)
				}
			}
		}
		t.Logf("%+v: %d pairs, gap %.3g, %d iterations, shed %.3g rps", cfg, pairs, sol.DualityGap, sol.Iterations, sol.TotalShedRPS)
	}
}

// TestSparseChurnSolves solves 100x5000 of the sparse shape with churn
// 500 (the optimizer service's default) against the optimum at 10% more
// demand. Before the hot start covered the churn run it ended at a gap
// of 3% after 141 iterations.
func TestSparseChurnSolves(t *testing.T) {
	cfg := synth.Sparse{Clusters: 100, Engines: 5000, Seed: 1, Load: 0.77}
	prev, err := optimizer.Solve(synth.SparseInstance(cfg), optimizer.Tolerance(1e-3))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Load = 0.7
	in := synth.SparseInstance(cfg)
	in.Previous, in.ChurnWeight = prev.Weights, 500
	sol, err := optimizer.Solve(in, optimizer.Tolerance(1e-3))
	if err != nil {
		t.Fatal(err)
	}
	if sol.DualityGap > 1e-3 {
		t.Errorf("gap %.3g after %d iterations, want <= 1e-3", sol.DualityGap, sol.Iterations)
	}
	t.Logf("gap %.3g, %d iterations, churn %.4g rps", sol.DualityGap, sol.Iterations, sol.ChurnRPS)
}
