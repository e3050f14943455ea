package estimate

import (
	"encoding/binary"
	"math"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"

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
// obs are too few (flagging the profile prior), and be safe for concurrent
// use (ComputeParallel calls it from several goroutines). The optimizer
// package may provide one; ConvexFit is the built-in.
type Fitter func(obs []Obs, gpuClass string, k Kind) *schemas.LatencyProfile

// MinSamples is the number of requests below which a profile is flagged
// as (mostly) prior.
const MinSamples = 20

// ConvexFit is the built-in Fitter: a piecewise-linear curve on Knots(),
// written f(u) = c0 + c1·u + Σ cj·max(0, u−kj) with every c ≥ 0 (so f is
// non-negative, non-decreasing and convex), fitted by weighted
// non-negative least squares (Lawson–Hanson on the normal equations, gonum Cholesky) to obs plus
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
		dataMean += float64(o.Weight * o.LatencyMs)
		priorMean += float64(o.Weight * p.PriorLatency(k, o.Utilization))
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
	var prob normal
	prob.n = len(ks) // c0, c1, and one hinge per interior knot (ks[1:len-1])
	pw := float64(0.01*total) + 0.5
	for _, o := range clean {
		prob.add(ks, o.Utilization, o.LatencyMs, o.Weight)
	}
	for _, u := range ks {
		prob.add(ks, u, scale*p.PriorLatency(k, u), pw)
	}
	c, ok := prob.nnls()
	if !ok {
		out := PriorProfile(gpuClass, k)
		out.Samples = samples
		return out
	}
	f := func(u float64) float64 {
		v := c[0] + float64(c[1]*u)
		for j := 1; j < len(ks)-1; j++ {
			v += c[j+1] * math.Max(0, u-ks[j])
		}
		return v
	}
	out := &schemas.LatencyProfile{Samples: samples, Prior: total < MinSamples}
	pts := make([]schemas.ProfilePoint, len(ks))
	out.Points = make([]*schemas.ProfilePoint, len(ks))
	for i, u := range ks {
		pts[i].Utilization, pts[i].LatencyMs = u, f(u)
		out.Points[i] = &pts[i]
	}
	var sse float64
	for _, o := range clean {
		d := o.LatencyMs - f(o.Utilization)
		sse += float64(o.Weight * d * d)
	}
	out.FitRmseMs = math.Sqrt(sse / total)
	if !finite(out.FitRmseMs) {
		return PriorProfile(gpuClass, k)
	}
	return out
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// maxBasis bounds the number of basis functions (len(Knots())).
const maxBasis = 16

// normal holds the normal equations G c = h of a weighted least-squares
// problem over at most maxBasis non-negative coefficients.
type normal struct {
	n int
	g [maxBasis * maxBasis]float64
	h [maxBasis]float64
}

// add adds the observation (u, l) with weight w; the basis at u is
// 1, u, max(0, u−ks[j]) for the interior knots.
func (p *normal) add(ks []float64, u, l, w float64) {
	var phi [maxBasis]float64
	phi[0], phi[1] = 1, u
	for j := 1; j < len(ks)-1; j++ {
		phi[j+1] = math.Max(0, u-ks[j])
	}
	for a := 0; a < p.n; a++ {
		if phi[a] == 0 {
			continue
		}
		p.h[a] += w * l * phi[a]
		for b := 0; b < p.n; b++ {
			p.g[a*maxBasis+b] += w * phi[a] * phi[b]
		}
	}
}

// nnls minimises the weighted squared error subject to c ≥ 0 (Lawson and
// Hanson's active-set method on the normal equations; each passive-set
// solve is a Cholesky factorisation with gonum's LAPACK, allocation-free).
// ok is false when it did not converge or produced a non-finite value.
func (p *normal) nnls() (x []float64, ok bool) {
	n := p.n
	x = make([]float64, n)
	var passive [maxBasis]bool
	var hmax float64
	for j := 0; j < n; j++ {
		hmax = math.Max(hmax, math.Abs(p.h[j]))
	}
	tol := 1e-12 * math.Max(hmax, 1)
	var z [maxBasis]float64
	var buf [maxBasis * maxBasis]float64
	var rhs [maxBasis]float64
	var idx [maxBasis]int
	solve := func() bool { // z = argmin on the passive set
		k := 0
		for j := 0; j < n; j++ {
			z[j] = 0
			if passive[j] {
				idx[k] = j
				k++
			}
		}
		if k == 0 {
			return true
		}
		for a := 0; a < k; a++ {
			rhs[a] = p.h[idx[a]]
			for b := 0; b < k; b++ {
				buf[a*k+b] = p.g[idx[a]*maxBasis+idx[b]]
			}
			buf[a*k+a] *= 1 + 1e-12 // guard against round-off singularity
		}
		sym := blas64.Symmetric{Uplo: blas.Upper, N: k, Stride: k, Data: buf[:k*k]}
		tri, ok := lapack64.Potrf(sym)
		if !ok {
			return false
		}
		lapack64.Potrs(tri, blas64.General{Rows: k, Cols: 1, Stride: 1, Data: rhs[:k]})
		for a := 0; a < k; a++ {
			z[idx[a]] = rhs[a]
		}
		return true
	}
	for outer := 0; outer < 3*n; outer++ {
		best, bj := tol, -1
		for j := 0; j < n; j++ { // gradient h − G x
			if passive[j] {
				continue
			}
			gj := p.h[j]
			for b := 0; b < n; b++ {
				gj -= p.g[j*maxBasis+b] * x[b]
			}
			if gj > best {
				best, bj = gj, j
			}
		}
		if bj < 0 {
			break
		}
		passive[bj] = true
		for inner := 0; ; inner++ {
			if inner > 3*n || !solve() {
				return nil, false
			}
			neg := false
			alpha := math.Inf(1)
			for j := 0; j < n; j++ {
				if passive[j] && z[j] <= 0 {
					neg = true
					if d := x[j] - z[j]; d > 0 {
						alpha = math.Min(alpha, x[j]/d)
					}
				}
			}
			if !neg {
				copy(x, z[:n])
				break
			}
			if math.IsInf(alpha, 1) {
				alpha = 0
			}
			for j := 0; j < n; j++ {
				x[j] += float64(alpha * (z[j] - x[j]))
				if passive[j] && x[j] <= 0 {
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

// FitCache memoizes a Fitter by its exact input: the kind, the GPU class
// and every observation's bits. Fitters are deterministic, so a cached
// profile is byte for byte the profile a new fit would return; an engine
// whose window holds the same observations as before (or as another
// engine of its class) is not refitted. Entries not used since the
// previous Rotate are dropped at the next one, so the cache holds at most
// two windows' profiles (memory grows with engines, not records). It is
// safe for concurrent use.
type FitCache struct {
	fit Fitter

	mu           sync.Mutex
	cur, prev    map[string]*schemas.LatencyProfile
	hits, misses uint64
}

// NewFitCache returns an empty cache in front of fit (nil: ConvexFit).
func NewFitCache(fit Fitter) *FitCache {
	if fit == nil {
		fit = ConvexFit
	}
	return &FitCache{fit: fit, cur: map[string]*schemas.LatencyProfile{}, prev: map[string]*schemas.LatencyProfile{}}
}

// Fit is a Fitter: the cached profile for this exact input (a copy the
// caller owns), else a new fit.
func (c *FitCache) Fit(obs []Obs, gpuClass string, k Kind) *schemas.LatencyProfile {
	return cloneProfile(c.Shared(obs, gpuClass, k))
}

// Shared is Fit without the copy: the profile it returns is the cached
// one, shared with every other caller for the same input, which must
// not modify it (for estimates that are encoded and dropped).
func (c *FitCache) Shared(obs []Obs, gpuClass string, k Kind) *schemas.LatencyProfile {
	var arr [8 + 32 + numBins*24]byte
	key := arr[:0]
	key = binary.LittleEndian.AppendUint32(key, uint32(k))
	key = binary.LittleEndian.AppendUint32(key, uint32(len(gpuClass)))
	key = append(key, gpuClass...)
	for _, o := range obs {
		key = binary.LittleEndian.AppendUint64(key, math.Float64bits(o.Utilization))
		key = binary.LittleEndian.AppendUint64(key, math.Float64bits(o.LatencyMs))
		key = binary.LittleEndian.AppendUint64(key, math.Float64bits(o.Weight))
	}
	c.mu.Lock()
	p, ok := c.cur[string(key)]
	if !ok {
		if p, ok = c.prev[string(key)]; ok {
			c.cur[string(key)] = p
		}
	}
	if ok {
		c.hits++
	} else {
		c.misses++
	}
	c.mu.Unlock()
	if ok {
		return p
	}
	p = c.fit(obs, gpuClass, k)
	c.mu.Lock()
	c.cur[string(key)] = p
	c.mu.Unlock()
	return p
}

// Rotate starts a new generation: entries not used since the previous
// Rotate are dropped.
func (c *FitCache) Rotate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev, c.cur = c.cur, make(map[string]*schemas.LatencyProfile, len(c.cur))
}

// Stats returns the number of cache hits and misses so far.
func (c *FitCache) Stats() (hits, misses uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}

// Len is the number of profiles held.
func (c *FitCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.prev)
}

// cloneProfile copies p (nil stays nil) with its points in one allocation.
func cloneProfile(p *schemas.LatencyProfile) *schemas.LatencyProfile {
	if p == nil {
		return nil
	}
	out := &schemas.LatencyProfile{Samples: p.Samples, FitRmseMs: p.FitRmseMs, Prior: p.Prior}
	if p.Points != nil {
		pts := make([]schemas.ProfilePoint, len(p.Points))
		out.Points = make([]*schemas.ProfilePoint, len(p.Points))
		for i, pt := range p.Points {
			if pt == nil {
				continue
			}
			pts[i].Utilization, pts[i].LatencyMs = pt.Utilization, pt.LatencyMs
			out.Points[i] = &pts[i]
		}
	}
	return out
}
