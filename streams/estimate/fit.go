package estimate

import (
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Obs is one observation for a latency profile: the mean latency of
// Weight requests seen at Utilization.
type Obs struct {
	Utilization, LatencyMs, Weight float64
}

// Fitter fits a convex non-decreasing latency profile of kind k for an
// engine of gpuClass from obs (any order; callers pass them sorted by
// utilization). It must not return NaN and must fall back to a prior when
// obs are too few (flagging the profile prior). The optimizer package may
// provide one; ConvexFit is the built-in.
type Fitter func(obs []Obs, gpuClass string, k Kind) *schemas.LatencyProfile

// MinSamples is the number of requests below which a profile is flagged
// as (mostly) prior.
const MinSamples = 20

// ConvexFit is the built-in Fitter: a piecewise-linear curve on Knots(),
// written f(u) = c0 + c1·u + Σ cj·max(0, u−kj) with every c ≥ 0 (so f is
// non-negative, non-decreasing and convex), fitted by weighted
// non-negative least squares (Lawson–Hanson, gonum QR) to obs plus
// pseudo-observations of the GPU-class prior at every knot. The prior is
// first rescaled to the data's level, and its pseudo-observations weigh
// 1% of the data each (plus 0.5), so it only shapes the curve where there
// is no data.
func ConvexFit(obs []Obs, gpuClass string, k Kind) *schemas.LatencyProfile {
	p := priorFor(gpuClass)
	var total, dataMean, priorMean float64
	clean := obs[:0:0]
	for _, o := range obs {
		if !(o.Weight > 0) || !finite(o.Utilization) || !finite(o.LatencyMs) || o.Utilization < 0 || o.LatencyMs < 0 || !finite(o.Weight) {
			continue
		}
		clean = append(clean, o)
		total += o.Weight
		dataMean += o.Weight * o.LatencyMs
		priorMean += o.Weight * p.PriorLatency(k, o.Utilization)
	}
	samples := uint32(math.Min(total, math.MaxUint32))
	if total == 0 {
		out := PriorProfile(gpuClass, k)
		return out
	}
	scale := 1.0
	if priorMean > 0 && dataMean > 0 {
		scale = math.Max(0.2, math.Min(5, dataMean/priorMean))
	}
	ks := Knots()
	nb := len(ks) // c0, c1, and one hinge per interior knot (ks[1:len-1])
	pw := 0.01*total + 0.5
	rows := len(clean) + len(ks)
	a := mat.NewDense(rows, nb, nil)
	b := mat.NewVecDense(rows, nil)
	fillRow := func(i int, u, l, w float64) {
		sw := math.Sqrt(w)
		a.Set(i, 0, sw)
		a.Set(i, 1, sw*u)
		for j := 1; j < len(ks)-1; j++ {
			a.Set(i, j+1, sw*math.Max(0, u-ks[j]))
		}
		b.SetVec(i, sw*l)
	}
	for i, o := range clean {
		fillRow(i, o.Utilization, o.LatencyMs, o.Weight)
	}
	for j, u := range ks {
		fillRow(len(clean)+j, u, scale*p.PriorLatency(k, u), pw)
	}
	c, ok := nnls(a, b)
	if !ok {
		out := PriorProfile(gpuClass, k)
		out.Samples = samples
		return out
	}
	f := func(u float64) float64 {
		v := c[0] + c[1]*u
		for j := 1; j < len(ks)-1; j++ {
			v += c[j+1] * math.Max(0, u-ks[j])
		}
		return v
	}
	out := &schemas.LatencyProfile{Samples: samples, Prior: total < MinSamples}
	for _, u := range ks {
		out.Points = append(out.Points, &schemas.ProfilePoint{Utilization: u, LatencyMs: f(u)})
	}
	var sse float64
	for _, o := range clean {
		d := o.LatencyMs - f(o.Utilization)
		sse += o.Weight * d * d
	}
	out.FitRmseMs = math.Sqrt(sse / total)
	if !finite(out.FitRmseMs) {
		return PriorProfile(gpuClass, k)
	}
	return out
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// nnls solves min ‖Ax − b‖ subject to x ≥ 0 (Lawson and Hanson, 1974).
// ok is false when it did not converge or produced a non-finite value.
func nnls(a *mat.Dense, b *mat.VecDense) (x []float64, ok bool) {
	m, n := a.Dims()
	x = make([]float64, n)
	passive := make([]bool, n)
	const tol = 1e-10
	grad := func() []float64 { // Aᵀ(b − Ax)
		r := mat.NewVecDense(m, nil)
		r.MulVec(a, mat.NewVecDense(n, append([]float64(nil), x...)))
		r.SubVec(b, r)
		g := mat.NewVecDense(n, nil)
		g.MulVec(a.T(), r)
		return g.RawVector().Data
	}
	solve := func() ([]float64, bool) { // least squares on the passive columns
		var idx []int
		for j := range passive {
			if passive[j] {
				idx = append(idx, j)
			}
		}
		z := make([]float64, n)
		if len(idx) == 0 {
			return z, true
		}
		sub := mat.NewDense(m, len(idx), nil)
		for c, j := range idx {
			for i := 0; i < m; i++ {
				sub.Set(i, c, a.At(i, j))
			}
		}
		var s mat.VecDense
		if err := s.SolveVec(sub, b); err != nil {
			return nil, false
		}
		for c, j := range idx {
			z[j] = s.AtVec(c)
		}
		return z, true
	}
	for outer := 0; outer < 3*n; outer++ {
		g := grad()
		best, bj := tol, -1
		for j := range g {
			if !passive[j] && g[j] > best {
				best, bj = g[j], j
			}
		}
		if bj < 0 {
			break
		}
		passive[bj] = true
		for inner := 0; ; inner++ {
			if inner > 3*n {
				return nil, false
			}
			z, ok := solve()
			if !ok {
				return nil, false
			}
			neg := false
			alpha := math.Inf(1)
			for j := range z {
				if passive[j] && z[j] <= tol {
					neg = true
					if d := x[j] - z[j]; d > 0 {
						alpha = math.Min(alpha, x[j]/d)
					}
				}
			}
			if !neg {
				copy(x, z)
				break
			}
			if math.IsInf(alpha, 1) {
				alpha = 0
			}
			for j := range x {
				x[j] += alpha * (z[j] - x[j])
				if passive[j] && x[j] <= tol {
					passive[j] = false
					x[j] = 0
				}
			}
		}
	}
	for _, v := range x {
		if !finite(v) || v < 0 {
			return nil, false
		}
	}
	return x, true
}
