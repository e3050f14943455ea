package optimizer

import (
	"math"
	"testing"
)

// TestZeroDemandClusterAddsNoLoad: a cluster without demand points at
// an engine but sends it nothing: each engine's planned load is the
// demand the other clusters' weights send it.
func TestZeroDemandClusterAddsNoLoad(t *testing.T) {
	for _, churn := range []float64{0, 5} {
		in := regionBC(t)
		in.ChurnWeight = churn
		in.Clusters[0].DemandRPS = 0
		sol, err := Solve(in)
		if err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for e, st := range sol.Engines {
			sent := sol.Weights["region-c"][e] * in.Clusters[1].DemandRPS
			if math.Abs(st.LoadRPS-sent) > 1e-6 {
				t.Errorf("churn %v: engine %s load %v rps, region-c sends it %v", churn, e, st.LoadRPS, sent)
			}
			total += st.LoadRPS
		}
		if math.Abs(total-40) > 1e-6 {
			t.Errorf("churn %v: engines' load %v rps, want region-c's 40", churn, total)
		}
	}
}

// TestRepairKeepsSolversSplitAtRoundingLevel: flows a rounding-level
// amount off their routed total (1e-9 of it) are rescaled row by row,
// keeping the solver's split: an engine the solver gave no flow gets
// none, and the others keep their ratio (a max-flow top-up would put the
// whole correction on one path, possibly the idle engine).
func TestRepairKeepsSolversSplitAtRoundingLevel(t *testing.T) {
	in := regionBC(t)
	in.Engines = append(in.Engines, Engine{ID: "a-0", CapacityRPS: 100, Healthy: true, LatencyMs: in.Engines[0].LatencyMs})
	in.RTTms["region-b"]["a-0"] = 1
	in.Clusters[0].DemandRPS, in.Clusters[1].DemandRPS = 30, 10 // room on every engine
	p, err := problemOf(in)
	if err != nil {
		t.Fatal(err)
	}
	fn := newFlowNet(p)
	routed := []float64{p.demand[0], p.demand[1]}
	x := make([]float64, len(p.eng))
	want := make([]float64, len(p.eng))
	for i := range routed {
		lo, hi := p.start[i], p.start[i+1]
		if hi-lo < 2 {
			t.Fatalf("cluster %d has %d edges, want >= 2", i, hi-lo)
		}
		// The first edge idle, the rest 1:2:..., the row 1e-9 short.
		sum := 0.0
		for e := lo + 1; e < hi; e++ {
			want[e] = float64(e - lo)
			sum += want[e]
		}
		for e := lo + 1; e < hi; e++ {
			want[e] *= routed[i] / sum
			x[e] = want[e] * (1 - 1e-9)
		}
	}
	fn.repair(p, routed, x)
	for e := range x {
		if want[e] == 0 && x[e] != 0 {
			t.Errorf("edge %d (engine %d): the solver sent nothing, repair %v", e, p.eng[e], x[e])
		}
		if math.Abs(x[e]-want[e]) > 1e-12*want[e] {
			t.Errorf("edge %d (engine %d): %v after repair, want the rescaled %v", e, p.eng[e], x[e], want[e])
		}
	}
}
