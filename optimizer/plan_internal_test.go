package optimizer

import (
	"fmt"
	"math"
	"math/rand/v2"
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

// randomChurnInstance is a seeded small fleet: 2-5 engines with convex
// three-point profiles, three clusters that may use every engine, churn
// weight 0, 20 or 40 ms and previous weights spread evenly.
func randomChurnInstance(seed uint64) *Instance {
	r := rand.New(rand.NewPCG(seed, 1))
	in := &Instance{MaxUtilization: 0.95, ChurnWeight: float64(r.IntN(3)) * 20, RTTms: map[string]map[string]float64{}, Previous: map[string]map[string]float64{}}
	ne := 2 + r.IntN(4)
	for j := range ne {
		in.Engines = append(in.Engines, Engine{ID: fmt.Sprintf("e-%d", j), CapacityRPS: 20 + 80*r.Float64(), Healthy: true,
			LatencyMs: [][2]float64{{0, 100 + 100*r.Float64()}, {0.5, 300 + 200*r.Float64()}, {0.9, 2000 + 2000*r.Float64()}}})
	}
	for i := range 3 {
		id := fmt.Sprintf("c-%d", i)
		in.Clusters = append(in.Clusters, Cluster{ID: id, DemandRPS: 1 + 60*r.Float64()})
		in.RTTms[id] = map[string]float64{}
		in.Previous[id] = map[string]float64{}
		for _, e := range in.Engines {
			in.RTTms[id][e.ID] = 50 * r.Float64()
			in.Previous[id][e.ID] = 1 / float64(ne)
		}
	}
	return in
}

// TestClusterStepRoutesExactlyItsDemand: re-optimising one cluster's
// flows with the others fixed ends with flows that add up to what the
// cluster routes, to rounding, whatever the price search's tolerance
// (it stops within 1e-4 of the demand here, and with churn the
// responses hold at the previous flows over ranges of prices, so it
// does not land on the demand in one step; the residual is then put on
// edges with room, never past an engine's capacity): no demand is lost
// or invented at each step.
func TestClusterStepRoutesExactlyItsDemand(t *testing.T) {
	for seed := range uint64(600) {
		in := randomChurnInstance(seed / 2)
		if seed%2 == 1 { // loaded: engines fill up
			for i := range in.Clusters {
				in.Clusters[i].DemandRPS *= 3
			}
		}
		s := solverAt(t, in)
		s.bcdTol = 1e-4 // a coarse search
		p := s.p
		for range 3 {
			for i := range p.demand {
				s.solveCluster(i)
				sum := 0.0
				for e := p.start[i]; e < p.start[i+1]; e++ {
					sum += s.x[e]
				}
				if d := math.Abs(sum - s.routed[i]); d > 1e-12*s.routed[i] {
					t.Fatalf("seed %d: cluster %d flows add up to %.17g, routes %.17g (off by %g)", seed, i, sum, s.routed[i], d)
				}
				for e := p.start[i]; e < p.start[i+1]; e++ {
					if j := p.eng[e]; !(s.x[e] >= 0) || s.load[j] > p.curves[j].cap*(1+1e-12) {
						t.Fatalf("seed %d: cluster %d sends %v to engine %d, load %v of capacity %v", seed, i, s.x[e], j, s.load[j], p.curves[j].cap)
					}
				}
			}
		}
	}
}

// TestNewtonPhaseNonFiniteFlowRestored: a Newton phase that leaves a
// flow at NaN, +Inf or -Inf, or a price at ±Inf, is undone: the flows
// and prices from before it are put back, so no non-finite number
// reaches the plan.
func TestNewtonPhaseNonFiniteFlowRestored(t *testing.T) {
	for _, tc := range []struct {
		name  string
		price bool
		v     float64
	}{
		{"flow NaN", false, math.NaN()}, {"flow +Inf", false, math.Inf(1)}, {"flow -Inf", false, math.Inf(-1)},
		{"price +Inf", true, math.Inf(1)}, {"price -Inf", true, math.Inf(-1)},
	} {
		s := solverAt(t, regionBC(t))
		x, mu := append([]float64(nil), s.x...), append([]float64(nil), s.mu...)
		for k := range mu {
			mu[k] = 100 + float64(k)
		}
		if tc.price {
			s.mu[1] = tc.v
		} else {
			s.x[1] = tc.v
		}
		s.restoreIfNonFinite(x, mu)
		for e := range x {
			if s.x[e] != x[e] {
				t.Errorf("%s: flow %d is %v, want %v restored", tc.name, e, s.x[e], x[e])
			}
		}
		for i := range mu {
			if s.mu[i] != mu[i] {
				t.Errorf("%s: price %d is %v, want %v restored", tc.name, i, s.mu[i], mu[i])
			}
		}
	}
}

// TestEngineCurveIsOneAllocation: an engine's curve (knots, values and
// slopes) is built in one allocation however many profile points fall
// inside (0, max utilization): the solver builds one per engine per
// solve.
func TestEngineCurveIsOneAllocation(t *testing.T) {
	pts := [][2]float64{{0, 250}, {0.5, 500}, {0.8, 1250}, {0.9, 2500}, {0.95, 5000}}
	var c curve
	if n := testing.AllocsPerRun(20, func() { c = newCurve(pts, 100, 0.95) }); n != 1 {
		t.Fatalf("newCurve: %v allocations, want 1", n)
	}
	if len(c.l) != 5 || len(c.s) != 4 || c.cap != 95 {
		t.Fatalf("curve knots %v slopes %v cap %v, want 5 knots (0, 50, 80, 90, 95 rps) and 4 slopes", c.l, c.s, c.cap)
	}
}

// TestNoChurnWeightNoChurnBinding: without a churn weight nothing holds
// traffic where it was, so no explanation names "churn" as binding, even
// on an engine whose flow is exactly the previous one (region-c's 40 rps
// stay on c-0, as before).
func TestNoChurnWeightNoChurnBinding(t *testing.T) {
	in := regionBC(t)
	in.ChurnWeight = 0
	in.Clusters[0].DemandRPS = 10
	delete(in.RTTms["region-c"], "b-0") // region-c may use c-0 only
	sol, err := Solve(in)
	if err != nil {
		t.Fatal(err)
	}
	if w := sol.Weights["region-c"]["c-0"]; w != 1 {
		t.Fatalf("region-c sends %v of its demand to c-0, want all of it (as before)", w)
	}
	for c, expl := range sol.Explanations {
		for _, x := range expl {
			for _, b := range x.Binding {
				if b == "churn" {
					t.Errorf("cluster %s engine %s: binding %v with churn weight 0", c, x.Engine, x.Binding)
				}
			}
		}
	}
}
