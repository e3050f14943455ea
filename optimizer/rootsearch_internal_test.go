package optimizer

import (
	"math"
	"testing"
)

// The tests of this file hold the churn solver's engine price to its
// equation: solveInterval returns the root m of S*exp((M-m)/tau) + C =
// L(m) (the free arcs' demand plus the saturated caps equal the
// engine's supply at price m), whatever the bracket it starts from.

// priceResidual is h(m) = S*exp((M-m)/tau) + C - L(m) relative to the
// supply, so a root within rounding is near 0 at any scale.
func priceResidual(m, M, S, C, tau float64, supply func(float64) (float64, float64)) float64 {
	L, _ := supply(m)
	return (S*math.Exp((M-m)/tau) + C - L) / math.Max(1, math.Abs(L))
}

// TestEnginePriceRootAboveFirstStepOfUnboundedBracket: with the bracket
// open above, the search steps up from max(lo, M) until the equation's
// sign changes; the root lies two steps up (the free arcs' demand is 100
// at price M, the supply 5 there), so stopping after the first step
// returns a price where the free arcs still ask ~6x the supply.
func TestEnginePriceRootAboveFirstStepOfUnboundedBracket(t *testing.T) {
	const M, S, C, tau = -1000.0, 100.0, 0.0, 1.0
	supply := func(m float64) (float64, float64) { return m + 1005, 1 } // L(m) = m + 1005
	m := solveInterval(-1005, math.Inf(1), M, S, C, tau, supply)
	if r := priceResidual(m, M, S, C, tau, supply); !(math.Abs(r) < 1e-9) {
		t.Fatalf("price %v: relative residual %v, want the root (~ -998)", m, r)
	}
	if !(m > -999 && m < -997) {
		t.Fatalf("price %v, want the root in (-999, -997)", m)
	}
}

// TestEnginePriceRootAtDomainEndConverges: where the free arcs carry
// next to nothing (S*exp((M-lo)/tau) ~ 1e-13) the root is within 1e-13
// of the domain's end lo (L(lo) = C); Newton on h from lo lands on it,
// where a search that only creeps down from hi stops a whole tau above.
func TestEnginePriceRootAtDomainEndConverges(t *testing.T) {
	const M, S, C, tau = -60.0, 1.0, 0.0, 1.0
	supply := func(m float64) (float64, float64) { return m + 30, 1 } // L(m) = m + 30, 0 at -30
	for _, hi := range []float64{10, 1e6, math.Inf(1)} {
		m := solveInterval(-30, hi, M, S, C, tau, supply)
		if r := priceResidual(m, M, S, C, tau, supply); !(math.Abs(r) < 1e-9) {
			t.Errorf("hi %v: price %v: relative residual %v, want the root (~ -30 + 9e-14)", hi, m, r)
		}
		if !(m >= -30 && m-(-30) < 1e-9) {
			t.Errorf("hi %v: price %v, want within 1e-9 of -30", hi, m)
		}
	}
}
