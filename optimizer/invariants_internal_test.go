package optimizer

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// The tests of this file hold the published plan to the invariants
// solution.go keeps against rounding and degenerate input: a cluster
// without demand points at its cheapest engine, the published weights
// never send an engine more than its capacity, rounding is not published
// as shedding (but a real shed is), and the duality gap is a certificate
// in [0, 1].

func regionBC(t *testing.T) *Instance {
	t.Helper()
	data, err := os.ReadFile("testdata/region-bc.json")
	if err != nil {
		t.Fatal(err)
	}
	in := new(Instance)
	if err := json.Unmarshal(data, in); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestZeroDemandClusterPointsAtCheapestEngine: a cluster with no demand
// gets weight 1 on the engine cheapest at the margin (round trip plus the
// engine's price) with room, not all-zero weights: when the other
// cluster loads the near engine, the far idle one is cheaper; at light
// load the near one is. With every engine full there is nothing with
// room, and the plan says so: weights empty, shed 1.
func TestZeroDemandClusterPointsAtCheapestEngine(t *testing.T) {
	for _, tc := range []struct {
		name    string
		demandC float64 // the other cluster's demand, rps
		want    string  // the idle cluster's engine, "" for none
	}{
		{"light load: the near engine", 1, "b-0"},
		{"near engine loaded: the far idle one", 60, "c-0"},
		{"every engine full: nothing", 500, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := regionBC(t)
			in.Previous = nil
			in.Clusters[0].DemandRPS = 0 // region-b: b-0 2 ms away, c-0 40
			in.Clusters[1].DemandRPS = tc.demandC
			// region-c uses only b-0 (c-0 is far for it), so b-0's price
			// rises with its demand.
			in.RTTms["region-c"] = map[string]float64{"b-0": 2, "c-0": 400}
			sol, err := Solve(in)
			if err != nil {
				t.Fatal(err)
			}
			w, shed := sol.Weights["region-b"], sol.Shed["region-b"]
			if tc.want == "" {
				if len(w) != 0 || shed != 1 {
					t.Fatalf("weights %v shed %v, want none and 1", w, shed)
				}
				return
			}
			if len(w) != 1 || w[tc.want] != 1 || shed != 0 {
				t.Fatalf("weights %v shed %v, want %s: 1 and 0 (prices %v)", w, shed, tc.want, sol.Engines)
			}
			// The engine is the cheapest at the margin: round trip + price.
			cost := func(e string) float64 { return in.RTTms["region-b"][e] + sol.Engines[e].MarginalMs }
			for e := range sol.Engines {
				if cost(e) < cost(tc.want) {
					t.Fatalf("%s costs %.1f ms at the margin, less than %s's %.1f", e, cost(e), tc.want, cost(tc.want))
				}
			}
		})
	}
}

// solverAt returns a solver for in after its max-flow start (feasible
// flows), as Solve builds it.
func solverAt(t *testing.T, in *Instance) *solver {
	t.Helper()
	p, err := problemOf(in)
	if err != nil {
		t.Fatal(err)
	}
	return newSolver(p, nil)
}

// TestPublishedPlanNeverExceedsCapacity: whatever flows the solver ends
// with, the published weights send no engine more than its capacity
// (capacity_rps × max_utilization): with 240 rps of demand on 171 of
// capacity, flows 1.4x over the capacity are scaled back to it and the
// rest (69 rps) is shed, each cluster's weights and shed still adding up
// to 1.
func TestPublishedPlanNeverExceedsCapacity(t *testing.T) {
	in := regionBC(t)
	in.Clusters[0].DemandRPS = 200
	s := solverAt(t, in)
	for e := range s.x {
		s.x[e] *= 1.4
	}
	sol := s.solution(0, 0)
	demand := map[string]float64{}
	for _, c := range in.Clusters {
		demand[c.ID] = c.DemandRPS
	}
	sent := map[string]float64{}
	for c, w := range sol.Weights {
		sum := sol.Shed[c]
		for e, x := range w {
			sent[e] += x * demand[c]
			sum += x
		}
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("cluster %s: weights and shed add up to %v", c, sum)
		}
	}
	full := 0
	for _, e := range in.Engines {
		limit := e.CapacityRPS * in.MaxUtilization
		if sent[e.ID] > limit*(1+1e-9) || sol.Engines[e.ID].LoadRPS > limit*(1+1e-9) {
			t.Errorf("engine %s: weights send %.3f rps, load %.3f, capacity %.3f", e.ID, sent[e.ID], sol.Engines[e.ID].LoadRPS, limit)
		}
		if sent[e.ID] > limit*(1-1e-9) {
			full++
		}
	}
	if full != 2 || math.Abs(sol.TotalShedRPS-(240-171)) > 1e-6 {
		t.Errorf("%d of 2 engines full, %v rps shed, want 2 and 69: the excess was dropped, not scaled", full, sol.TotalShedRPS)
	}
}

// TestShedPublishesRealSheddingOnly: a cluster whose flows fall short of
// its demand by rounding (1e-12 of it) is published with shed exactly 0;
// one short by a millionth is published with that shed.
func TestShedPublishesRealSheddingOnly(t *testing.T) {
	for _, tc := range []struct {
		short, want float64
	}{{1e-12, 0}, {1e-6, 1e-6}} {
		in := regionBC(t)
		s := solverAt(t, in)
		p := s.p
		for e := p.start[0]; e < p.start[1]; e++ { // region-b's edges
			s.x[e] *= 1 - tc.short
		}
		sol := s.solution(0, 0)
		if got := sol.Shed["region-b"]; math.Abs(got-tc.want) > 1e-12 || (tc.want == 0 && got != 0) {
			t.Errorf("flows short by %g: shed %g, want %g", tc.short, got, tc.want)
		}
		if got, want := sol.TotalShedRPS, tc.want*in.Clusters[0].DemandRPS; math.Abs(got-want) > 1e-9 || (want == 0 && got != 0) {
			t.Errorf("flows short by %g: total shed %g rps, want %g", tc.short, got, want)
		}
	}
}

// TestDualityGapIsACertificateInUnitRange: the published gap is the
// solver's relative gap when it is in [0, 1], and 1 ("no useful
// certificate") when it is larger, infinite or NaN.
func TestDualityGapIsACertificateInUnitRange(t *testing.T) {
	for _, tc := range []struct{ gap, want float64 }{
		{0, 0}, {0.25, 0.25}, {1, 1}, {1 + 1e-9, 1}, {3.5, 1}, {math.Inf(1), 1}, {math.Inf(-1), 1}, {math.NaN(), 1},
	} {
		s := solverAt(t, regionBC(t))
		if got := s.solution(tc.gap, 0).DualityGap; got != tc.want {
			t.Errorf("gap %v published as %v, want %v", tc.gap, got, tc.want)
		}
	}
	// And a solve's certificate is small and within the range.
	sol, err := Solve(regionBC(t))
	if err != nil {
		t.Fatal(err)
	}
	if !(sol.DualityGap >= 0 && sol.DualityGap <= 1e-4) {
		t.Fatalf("solve's gap %v, want in [0, 1e-4] (the default tolerance)", sol.DualityGap)
	}
}
