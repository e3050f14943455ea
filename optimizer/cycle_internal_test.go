package optimizer

import (
	"math"
	"testing"
)

// The tests of this file hold cancelCycle's line search to its contract:
// it moves the flows along an exchange by the step that minimises the
// objective, as far as the constraints allow.

// exchangePair is a solver with one cluster on engines "a" and "b" (each
// 100 rps, engine latency 100 + L ms, so the marginal latency g'(L) =
// 100 + 2L), the round trip to "b" rttB ms more than to "a", sending xA
// and xB rps; it returns the solver and the edges to "a" and "b".
func exchangePair(t *testing.T, rttB, xA, xB float64) (s *solver, ea, eb int32) {
	t.Helper()
	prof := [][2]float64{{0, 100}, {1, 200}}
	in := &Instance{
		MaxUtilization: 1,
		Clusters:       []Cluster{{ID: "c", DemandRPS: xA + xB}},
		Engines:        []Engine{{ID: "a", CapacityRPS: 100, Healthy: true, LatencyMs: prof}, {ID: "b", CapacityRPS: 100, Healthy: true, LatencyMs: prof}},
		RTTms:          map[string]map[string]float64{"c": {"a": 0, "b": rttB}},
	}
	s = solverAt(t, in)
	s.indexEngines()
	p := s.p
	for e := p.start[0]; e < p.start[1]; e++ {
		switch p.engineID[p.eng[e]] {
		case "a":
			ea = e
			s.x[e] = xA
		case "b":
			eb = e
			s.x[e] = xB
		}
	}
	s.recomputeLoads()
	return s, ea, eb
}

// TestLineSearchStopsAtTheMinimum: moving traffic from "b" (round trip
// 20.2 ms longer) to "a" pays until the marginal costs meet: with 10 rps
// on "a" and 0.5 on "b" that is after 0.3 rps (marginal cost on "a" 100
// + 2*10.3 = 120.6 ms, on "b" 20.2 + 100 + 2*0.2 = 120.6 ms), not at
// the end of the feasible step (0.5 rps, where "a" already costs 0.8 ms
// more at the margin).
func TestLineSearchStopsAtTheMinimum(t *testing.T) {
	s, ea, eb := exchangePair(t, 20.2, 10, 0.5)
	if !s.lineSearch(map[int32]float64{ea: 1, eb: -1}) {
		t.Fatal("line search reports no decrease, want a move of 0.3 rps")
	}
	if math.Abs(s.x[ea]-10.3) > 1e-9 || math.Abs(s.x[eb]-0.2) > 1e-9 {
		t.Fatalf("flows a %v b %v, want 10.3 and 0.2 (marginal costs equal)", s.x[ea], s.x[eb])
	}
}

// TestLineSearchMovesAllOfASmallFlow: when the engine receiving the
// traffic is still cheaper at the margin after taking all of it (0.5
// rps, a round trip 22 ms shorter), the whole flow moves, however small.
func TestLineSearchMovesAllOfASmallFlow(t *testing.T) {
	s, ea, eb := exchangePair(t, 22, 10, 0.5)
	if !s.lineSearch(map[int32]float64{ea: 1, eb: -1}) {
		t.Fatal("line search reports no decrease, want the 0.5 rps moved")
	}
	if math.Abs(s.x[ea]-10.5) > 1e-9 || s.x[eb] != 0 {
		t.Fatalf("flows a %v b %v, want 10.5 and 0", s.x[ea], s.x[eb])
	}
	if s.load[s.p.eng[ea]] != s.x[ea] || s.load[s.p.eng[eb]] != 0 {
		t.Fatalf("loads a %v b %v, want the flows", s.load[s.p.eng[ea]], s.load[s.p.eng[eb]])
	}
}
