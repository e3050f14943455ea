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
// kkt is set, optimality: without churn first-order conditions
// (checkMarginals); with or without churn that no exchange of traffic
// between two of a cluster's engines improves the objective by more than
// the certified gap (checkExchanges); and a duality gap of at most 1e-3.
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
	if !kkt {
		return
	}
	if in.ChurnWeight == 0 {
		checkMarginals(t, in, sol, engines, load)
	}
	checkExchanges(t, in, sol, engines, load)
	if sol.DualityGap > 1e-3 {
		t.Errorf("duality gap %v", sol.DualityGap)
	}
}

// checkMarginals asserts first-order optimality without churn: no cluster
// could move traffic from an engine it uses to another engine with spare
// capacity and gain more than the tolerance at the margin.
func checkMarginals(t *testing.T, in *optimizer.Instance, sol *optimizer.Solution, engines map[string]optimizer.Engine, load map[string]float64) {
	t.Helper()
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
}

// checkExchanges asserts that moving d rps of a cluster's traffic from an
// engine it uses to another of its engines with room, for d from all of
// it down to 1/4096 of it, never lowers the full objective (latency plus
// churn, ms*rps, evaluated from the instance format) by more than the
// certified gap allows. The change is exact (not first-order), so loads
// that end a rounding distance past a profile knot, as tolerance-limited
// churn plans do, are judged by what moving traffic actually gains.
func checkExchanges(t *testing.T, in *optimizer.Instance, sol *optimizer.Solution, engines map[string]optimizer.Engine, load map[string]float64) {
	t.Helper()
	g := func(id string, l float64) float64 {
		e := engines[id]
		return l * latency(e.LatencyMs, l/e.CapacityRPS)
	}
	total := 0.0
	for id, l := range load {
		total += g(id, l)
	}
	flows := map[[2]string]float64{}
	for _, c := range in.Clusters {
		for id, w := range sol.Weights[c.ID] {
			x := w * c.DemandRPS
			flows[[2]string{c.ID, id}] = x
			total += x * in.RTTms[c.ID][id]
		}
	}
	prev := func(c optimizer.Cluster, id string) float64 {
		pw := in.Previous[c.ID][id]
		if pw < 1e-9 { // the optimizer's dust threshold for previous weights
			pw = 0
		}
		return pw * c.DemandRPS
	}
	churn := func(c optimizer.Cluster, id string, x float64) float64 {
		return in.ChurnWeight * math.Abs(x-prev(c, id))
	}
	for _, c := range in.Clusters {
		for id := range in.RTTms[c.ID] {
			total += churn(c, id, flows[[2]string{c.ID, id}])
		}
	}
	allow := math.Max(sol.DualityGap, 1e-6)*total + 1e-9
	for _, c := range in.Clusters {
		for from, w := range sol.Weights[c.ID] {
			x := w * c.DemandRPS
			for to, r := range in.RTTms[c.ID] {
				e := engines[to]
				if to == from || !e.Healthy || e.CapacityRPS <= 0 {
					continue
				}
				room := e.CapacityRPS*in.MaxUtilization - load[to]
				y := flows[[2]string{c.ID, to}]
				for d := math.Min(x, room); d > x/4096 && d > 1e-9; d /= 4 {
					gain := g(from, load[from]) - g(from, load[from]-d) + g(to, load[to]) - g(to, load[to]+d) +
						(in.RTTms[c.ID][from]-r)*d +
						churn(c, from, x) - churn(c, from, x-d) + churn(c, to, y) - churn(c, to, y+d)
					if gain > allow {
						t.Errorf("exchange: moving %.4g rps of %s from %s to %s gains %.4g ms*rps, more than the gap %.3g allows (%.4g)", d, c.ID, from, to, gain, sol.DualityGap, allow)
						break
					}
				}
			}
		}
	}
}
