package optimizer_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/switchyard-llm/switchyard/optimizer"
)

// latency evaluates an instance profile the way the format defines it.
func latency(pts [][2]float64, u float64) float64 {
	p := optimizer.Profile{}
	for _, q := range pts {
		p.Points = append(p.Points, optimizer.ProfilePoint{Utilization: q[0], LatencyMs: q[1]})
	}
	return p.At(u)
}

// marginal returns the one-sided marginal latencies d/dL of L*f(L/C) at
// load L, from the instance profile. Loads within 1e-5 utilization of a
// knot count as at the knot (rounding moves flows by that much).
func marginal(e optimizer.Engine, maxU, L float64) (left, right float64) {
	c := e.CapacityRPS
	u := L / c
	pts := e.LatencyMs
	slope := func(v float64) float64 { // slope of f (ms per unit utilization) at v
		if len(pts) < 2 || v < pts[0][0] {
			return 0
		}
		for k := 1; k < len(pts); k++ {
			if v < pts[k][0] || k == len(pts)-1 {
				return (pts[k][1] - pts[k-1][1]) / (pts[k][0] - pts[k-1][0])
			}
		}
		return 0
	}
	const eps = 1e-5
	f := latency(pts, u)
	left, right = math.Inf(-1), math.Inf(1)
	if u > eps {
		left = f + u*slope(u-eps)
	}
	if u < maxU-eps {
		right = f + u*slope(u+eps)
	}
	return left, right
}

// checkSolution asserts the hard constraints of sol for in and, when
// kkt is set, first-order optimality: no cluster could move traffic from
// an engine it uses to another engine with spare capacity and gain more
// than the tolerance (valid without churn).
func checkSolution(t *testing.T, in *optimizer.Instance, sol *optimizer.Solution, kkt bool) {
	t.Helper()
	if _, err := json.Marshal(sol); err != nil {
		t.Fatalf("solution does not encode (NaN?): %v", err)
	}
	engines := map[string]optimizer.Engine{}
	for _, e := range in.Engines {
		engines[e.ID] = e
	}
	load := map[string]float64{}
	for _, c := range in.Clusters {
		sum := 0.0
		for id, w := range sol.Weights[c.ID] {
			if !(w >= 0) || w > 1+1e-12 {
				t.Fatalf("weight %s/%s = %v", c.ID, id, w)
			}
			e, ok := engines[id]
			if !ok {
				t.Fatalf("weight to unknown engine %s", id)
			}
			if _, ok := in.RTTms[c.ID][id]; !ok && w > 0 {
				t.Fatalf("residency violated: %s -> %s", c.ID, id)
			}
			if !e.Healthy && w > 0 {
				t.Fatalf("unhealthy engine %s got weight %v from %s", id, w, c.ID)
			}
			sum += w
			load[id] += w * c.DemandRPS
		}
		shed, ok := sol.Shed[c.ID]
		if !ok || !(shed >= 0) || shed > 1 {
			t.Fatalf("shed[%s] = %v, %v", c.ID, shed, ok)
		}
		if math.Abs(sum+shed-1) > 1e-9 {
			t.Fatalf("cluster %s: weights %v + shed %v != 1", c.ID, sum, shed)
		}
	}
	for _, e := range in.Engines {
		st := sol.Engines[e.ID]
		if math.Abs(st.LoadRPS-load[e.ID]) > 1e-6*(1+load[e.ID]) {
			t.Fatalf("engine %s load %v, weights say %v", e.ID, st.LoadRPS, load[e.ID])
		}
		if st.Utilization > in.MaxUtilization || (e.CapacityRPS > 0 && load[e.ID]/e.CapacityRPS > in.MaxUtilization*(1+1e-12)) {
			t.Fatalf("engine %s utilization %v above %v", e.ID, st.Utilization, in.MaxUtilization)
		}
	}
	if !kkt || in.ChurnWeight > 0 {
		return
	}
	for _, c := range in.Clusters {
		if c.DemandRPS == 0 {
			continue
		}
		// The cheapest engine at the margin with room left.
		best := math.Inf(1)
		for id, r := range in.RTTms[c.ID] {
			e := engines[id]
			if !e.Healthy || e.CapacityRPS <= 0 {
				continue
			}
			_, right := marginal(e, in.MaxUtilization, load[id])
			best = math.Min(best, r+right)
		}
		for id, w := range sol.Weights[c.ID] {
			if w*c.DemandRPS < 1e-3 {
				continue
			}
			left, _ := marginal(engines[id], in.MaxUtilization, load[id])
			m := in.RTTms[c.ID][id] + left
			if m > best*(1+5e-3)+1 {
				t.Errorf("KKT: cluster %s uses %s at marginal %.3f ms but an engine with room costs %.3f ms", c.ID, id, m, best)
			}
		}
	}
	if sol.DualityGap > 1e-3 {
		t.Errorf("duality gap %v", sol.DualityGap)
	}
}
