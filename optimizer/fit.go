package optimizer

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/switchyard-llm/switchyard/schemas"
)

// ProfilePoint is one knot of a latency profile.
type ProfilePoint struct {
	Utilization float64 `json:"utilization"`
	LatencyMs   float64 `json:"latency_ms"`
}

// Profile is a convex non-decreasing piecewise-linear latency profile.
type Profile struct {
	Points []ProfilePoint `json:"points"`
	// Samples is the number of observations behind the fit.
	Samples int `json:"samples"`
	// RMSEms is the root-mean-square error of the fit on those
	// observations (0 without observations).
	RMSEms float64 `json:"rmse_ms"`
	// Prior is true when the prior outweighs the data.
	Prior bool `json:"prior"`
}

// Observation is one measured latency at a utilization (load/capacity).
type Observation struct {
	Utilization float64
	LatencyMs   float64
	// Weight of the observation; 0 means 1.
	Weight float64
}

// ErrNoData is returned by FitProfile when there are neither valid
// observations nor a prior.
var ErrNoData = errors.New("no observations and no prior")

// Latency converts p to the [utilization, ms] list of Engine.LatencyMs.
func (p Profile) Latency() [][2]float64 {
	out := make([][2]float64, len(p.Points))
	for k, q := range p.Points {
		out[k] = [2]float64{q.Utilization, q.LatencyMs}
	}
	return out
}

// Proto converts p to its wire form.
func (p Profile) Proto() *schemas.LatencyProfile {
	out := &schemas.LatencyProfile{Samples: uint32(min(max(p.Samples, 0), math.MaxUint32)), FitRmseMs: p.RMSEms, Prior: p.Prior}
	for _, q := range p.Points {
		out.Points = append(out.Points, &schemas.ProfilePoint{Utilization: q.Utilization, LatencyMs: q.LatencyMs})
	}
	return out
}

// ProfileFromProto converts the wire form back; it does not validate.
func ProfileFromProto(lp *schemas.LatencyProfile) Profile {
	var p Profile
	if lp == nil {
		return p
	}
	p.Samples, p.RMSEms, p.Prior = int(lp.GetSamples()), lp.GetFitRmseMs(), lp.GetPrior()
	for _, q := range lp.GetPoints() {
		p.Points = append(p.Points, ProfilePoint{Utilization: q.GetUtilization(), LatencyMs: q.GetLatencyMs()})
	}
	return p
}

// At evaluates the profile at utilization u (flat before the first
// point, extending the last segment after the last one).
func (p Profile) At(u float64) float64 {
	n := len(p.Points)
	switch {
	case n == 0:
		return 0
	case n == 1 || u <= p.Points[0].Utilization:
		return p.Points[0].LatencyMs
	}
	k := 1
	for k < n-1 && u > p.Points[k].Utilization {
		k++
	}
	a, b := p.Points[k-1], p.Points[k]
	return a.LatencyMs + (b.LatencyMs-a.LatencyMs)*(u-a.Utilization)/(b.Utilization-a.Utilization)
}

// FitOpt configures FitProfile.
type FitOpt interface{ applyFit(*fitConfig) }

type fitConfig struct {
	knots       []float64
	priorWeight float64
}

type fitOptionFunc func(*fitConfig)

func (f fitOptionFunc) applyFit(c *fitConfig) { f(c) }

// Knots sets the utilization grid of the fitted profile (sorted, >= 0,
// at least two). Default 0, .2, .4, .5, .6, .7, .8, .85, .9, .95, 1.
func Knots(u ...float64) FitOpt {
	return fitOptionFunc(func(c *fitConfig) { c.knots = slices.Clone(u) })
}

// PriorWeight sets how many observations the prior is worth, spread over
// the knots. Default 20.
func PriorWeight(w float64) FitOpt {
	return fitOptionFunc(func(c *fitConfig) { c.priorWeight = w })
}

// FitProfile fits a convex non-decreasing piecewise-linear latency profile
// to obs, shrunk towards prior (which may be empty) where data is thin.
//
// The fit is weighted least squares over the hinge basis
// 1, (u-t_0)+, (u-t_1)+, ... on the knot grid t with non-negative
// coefficients (Lawson–Hanson NNLS on the normal equations, gonum
// Cholesky for the passive-set solves). Every such combination is convex
// and non-decreasing with a non-negative intercept, and every convex
// non-decreasing piecewise-linear function with those knots and a
// non-negative value at 0 is such a combination, so this is exactly the
// constrained least-squares fit. The prior enters as pseudo-observations
// at the knots with total weight PriorWeight, after scaling the prior by
// the one factor that best fits the data (clamped to [1/4, 4]): the class
// gives the shape, the data the level. Observations that are not
// finite, have negative latency or utilization are ignored.
func FitProfile(obs []Observation, prior Profile, opts ...FitOpt) (Profile, error) {
	cfg := fitConfig{knots: []float64{0, .2, .4, .5, .6, .7, .8, .85, .9, .95, 1}, priorWeight: 20}
	for _, o := range opts {
		o.applyFit(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return Profile{}, err
	}
	t := cfg.knots
	ne := newNormalEq(t)
	var used []Observation
	wsum := 0.0
	for _, o := range obs {
		w := o.Weight
		if w == 0 {
			w = 1
		}
		if !finite(o.Utilization) || !finite(o.LatencyMs) || !finite(w) || o.Utilization < 0 || o.LatencyMs < 0 || w < 0 {
			continue
		}
		used = append(used, o)
		wsum += w
		ne.add(o.Utilization, o.LatencyMs, w)
	}
	hasPrior := len(prior.Points) > 0 && cfg.priorWeight > 0
	if hasPrior {
		for _, q := range prior.Points {
			if !finite(q.Utilization) || !finite(q.LatencyMs) {
				return Profile{}, errors.New("prior has a non-finite point")
			}
		}
		scale := priorScale(used, prior)
		for _, u := range t {
			ne.add(u, scale*prior.At(u), cfg.priorWeight/float64(len(t)))
		}
	}
	if len(used) == 0 && !hasPrior {
		return Profile{}, ErrNoData
	}
	beta := ne.solve()
	out := Profile{Samples: len(used), Prior: hasPrior && wsum < cfg.priorWeight}
	for _, u := range t {
		ne.basis(u)
		v := 0.0
		for m := range ne.row {
			v += beta[m] * ne.row[m]
		}
		out.Points = append(out.Points, ProfilePoint{Utilization: u, LatencyMs: v})
	}
	if len(used) > 0 {
		se := 0.0
		for _, o := range used {
			d := out.At(o.Utilization) - o.LatencyMs
			se += float64(d * d)
		}
		out.RMSEms = math.Sqrt(se / float64(len(used)))
	}
	return out, nil
}

func (c *fitConfig) validate() error {
	if len(c.knots) < 2 || !slices.IsSorted(c.knots) || c.knots[0] < 0 {
		return fmt.Errorf("knots %v: want at least two, sorted, >= 0", c.knots)
	}
	for k := 1; k < len(c.knots); k++ {
		if !(c.knots[k] > c.knots[k-1]) || !finite(c.knots[k]) {
			return fmt.Errorf("knots %v: want strictly increasing and finite", c.knots)
		}
	}
	if !finite(c.priorWeight) || c.priorWeight < 0 {
		return fmt.Errorf("prior weight %v: want finite and >= 0", c.priorWeight)
	}
	return nil
}

// priorScale is the factor that best fits the prior to the observations,
// clamped to [1/4, 4] (1 without a fit): the prior gives the shape, its
// level is fitted to the data, so a fleet that is uniformly slower or
// faster than its class keeps the class's curvature where the data do not
// reach.
func priorScale(used []Observation, prior Profile) float64 {
	scale := 1.0
	num, den := 0.0, 0.0
	for _, o := range used {
		w := o.Weight
		if w == 0 {
			w = 1
		}
		pu := prior.At(o.Utilization)
		num += float64(w * o.LatencyMs * pu)
		den += float64(w * pu * pu)
	}
	if den > 0 && num > 0 {
		scale = math.Min(4, math.Max(0.25, num/den))
	}
	return scale
}

// normalEq accumulates the weighted least-squares normal equations over
// the hinge basis 1, (u-t_0)+, (u-t_1)+, ... of the knots t.
type normalEq struct {
	t    []float64
	gram *mat.SymDense
	rhs  []float64
	row  []float64 // the basis at the last u
}

func newNormalEq(t []float64) *normalEq {
	nb := len(t) // intercept + len(t)-1 hinges
	return &normalEq{t: t, gram: mat.NewSymDense(nb, nil), rhs: make([]float64, nb), row: make([]float64, nb)}
}

// basis sets ne.row to the basis at u.
func (ne *normalEq) basis(u float64) {
	ne.row[0] = 1
	for m := 1; m < len(ne.row); m++ {
		ne.row[m] = math.Max(0, u-ne.t[m-1])
	}
}

// add adds the observation y at u with weight w.
func (ne *normalEq) add(u, y, w float64) {
	ne.basis(u)
	row, nb := ne.row, len(ne.row)
	for a := 0; a < nb; a++ {
		ne.rhs[a] += w * row[a] * y
		for b := a; b < nb; b++ {
			ne.gram.SetSym(a, b, ne.gram.At(a, b)+w*row[a]*row[b])
		}
	}
}

// solve returns the non-negative coefficients. A tiny ridge keeps the
// Gram matrix positive definite when the data do not cover every hinge.
func (ne *normalEq) solve() []float64 {
	nb := len(ne.row)
	scale := 0.0
	for a := 0; a < nb; a++ {
		scale = math.Max(scale, ne.gram.At(a, a))
	}
	for a := 0; a < nb; a++ {
		ne.gram.SetSym(a, a, ne.gram.At(a, a)+1e-10*(scale+1))
	}
	return nnls(ne.gram, ne.rhs)
}

// nnls solves min 1/2 b'Gb - c'b subject to b >= 0 (Lawson–Hanson active
// set on the normal equations).
func nnls(g *mat.SymDense, c []float64) []float64 {
	n := len(c)
	b := make([]float64, n)
	passive := make([]bool, n)
	tol := 1e-12
	for outer := 0; outer < 3*n+10; outer++ {
		w := negGrad(g, c, b)
		best, bestW := -1, tol
		for a := range n {
			if !passive[a] && w[a] > bestW {
				best, bestW = a, w[a]
			}
		}
		if best < 0 {
			break
		}
		passive[best] = true
		for inner := 0; inner < 3*n+10; inner++ {
			z := passiveSolve(g, c, passive)
			if z == nil {
				passive[best] = false
				return b
			}
			feasible := true
			for a := range n {
				if passive[a] && z[a] <= 0 {
					feasible = false
				}
			}
			if feasible {
				copy(b, z)
				break
			}
			alpha := 1.0
			for a := range n {
				if passive[a] && z[a] <= 0 {
					alpha = math.Min(alpha, b[a]/(b[a]-z[a]))
				}
			}
			for a := range n {
				b[a] += float64(alpha * (z[a] - b[a]))
				if passive[a] && b[a] <= tol {
					passive[a] = false
					b[a] = 0
				}
			}
		}
	}
	return b
}

// negGrad returns c - G b, the negative gradient of nnls's objective.
func negGrad(g *mat.SymDense, c, b []float64) []float64 {
	n := len(c)
	w := make([]float64, n)
	for a := range n {
		w[a] = c[a]
		for k := range n {
			w[a] -= g.At(a, k) * b[k]
		}
	}
	return w
}

// passiveSolve solves G z = c on the passive set (z = 0 elsewhere), or
// returns nil when that system is singular.
func passiveSolve(g *mat.SymDense, c []float64, passive []bool) []float64 {
	n := len(c)
	var idx []int
	for a := range n {
		if passive[a] {
			idx = append(idx, a)
		}
	}
	z := make([]float64, n)
	if len(idx) == 0 {
		return z
	}
	sub := mat.NewSymDense(len(idx), nil)
	rhs := mat.NewVecDense(len(idx), nil)
	for p, a := range idx {
		rhs.SetVec(p, c[a])
		for q := p; q < len(idx); q++ {
			sub.SetSym(p, q, g.At(a, idx[q]))
		}
	}
	var ch mat.Cholesky
	var sol mat.VecDense
	if ok := ch.Factorize(sub); !ok || ch.SolveVecTo(&sol, rhs) != nil {
		return nil
	}
	for p, a := range idx {
		z[a] = sol.AtVec(p)
	}
	return z
}
