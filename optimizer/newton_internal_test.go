package optimizer

import (
	"math"
	"testing"
)

// TestNewtonLineSearchNeverLowersTheDual: the Newton line search accepts
// a step only when it raises the smoothed dual (by at least 1e-4 of the
// gain its slope predicts: Armijo's sufficient increase), and backtracks
// from one that lowers it, however slightly. On region-bc at the first
// temperature, the direction is the Newton step stretched past the dual's
// maximum along it (or shortened, where the full step already overshoots
// it), to where the full step lowers the dual by half of 1e-4 of the
// predicted gain: the search must take a shorter step that raises it.
func TestNewtonLineSearchNeverLowersTheDual(t *testing.T) {
	in := regionBC(t)
	in.Previous = nil
	s := solverAt(t, in)
	s.initPrices()
	s.indexEngines()
	act, pos := s.activeClusters()
	nt := s.newNewton(act, pos)
	nt.radius = math.Inf(1)
	tau := s.tau0
	f := nt.eval(nt.mu, tau, nt.cur)
	nt.hess(nt.cur, tau)
	grad := append([]float64(nil), nt.cur.grad...)
	g1 := norm1(grad)
	if !nt.solveDamped(grad, nt.avgDiag(), tau) {
		t.Fatal("Newton system not solved")
	}
	newtonDir := make([]float64, nt.n)
	slope := 0.0 // of the Newton step
	for a := range newtonDir {
		newtonDir[a] = nt.dir.AtVec(a)
		slope += grad[a] * newtonDir[a]
	}
	if !(slope > 0) {
		t.Fatalf("Newton step's slope %v, want an ascent direction", slope)
	}
	// gain(k) is the dual's change over k Newton steps plus 0.5e-4 of
	// their predicted gain k·slope: negative where the step lowers the
	// dual by more than that.
	at := make([]float64, nt.n)
	gain := func(k float64) float64 {
		for a := range at {
			at[a] = nt.mu[a] + k*newtonDir[a]
		}
		return nt.eval(at, tau, nt.next) - f + 0.5e-4*k*slope
	}
	// The dual is concave along the step: gain is positive from 0 up to
	// one crossing and negative past it. Bracket the crossing.
	lo, hi := 1.0, 1.0
	for gain(lo) <= 0 {
		if hi, lo = lo, lo/2; lo < 1e-12 {
			t.Fatal("the dual does not rise along the Newton step")
		}
	}
	for gain(hi) > 0 {
		if lo, hi = hi, 2*hi; hi > 1e6 {
			t.Fatal("the dual does not fall along the Newton step")
		}
	}
	for range 200 {
		m := (lo + hi) / 2
		if gain(m) > 0 {
			lo = m
		} else {
			hi = m
		}
	}
	k := hi
	for a := range newtonDir {
		nt.dir.SetVec(a, k*newtonDir[a])
	}
	full := gain(k) - 0.5e-4*k*slope
	if !(full < 0) || !(full > -1e-4*k*slope) {
		t.Fatalf("the stretched step changes the dual by %v, want within (-1e-4, 0) of its predicted gain %v", full, k*slope)
	}
	fNew, alpha, improved, _ := nt.lineSearch(f, g1, tau, grad)
	if !improved || !(fNew > f) || !(alpha < 1) {
		t.Fatalf("line search from dual %v: accepted %v step %v to dual %v (%+g); want a shorter step raising it",
			f, improved, alpha, fNew, fNew-f)
	}
}
