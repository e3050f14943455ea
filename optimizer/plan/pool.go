package plan

import (
	"cmp"
	"slices"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Partial pooling of latency profiles.
//
// An engine's fitted profile is the mean latency of the requests it served
// in one window, and at low rates or with a wide prompt-length mix that
// mean is mostly the luck of the draw: in the Mooncake trace one 50k-token
// prompt makes an engine look seconds slower than its twin for a window,
// and an optimiser that believes it sends most of the traffic to whichever
// engine drew the short prompts, then to another one the next window
// (docs/sim.md, conversations). Engines of one GPU class serving one model
// share a latency curve up to what their own samples show, so the planner
// uses, per engine, the sample-weighted blend
//
//	f(u) = (n·own(u) + K·class(u)) / (n + K)
//
// where n is the engine's sample count, class(u) the sample-weighted mean
// of the fresh profiles of its GPU class (itself included) that agree with
// the class, and K = PoolSamples. An engine with many samples keeps its
// own curve; one with a handful gets its class's. An engine whose profile
// departs from its class's (outliers.go) is neither in the class curve
// nor pulled toward it: its own last well-measured curve takes the
// class's place. Both curves are convex and non-decreasing,
// and so is a convex combination of them (evaluated on the engine's own
// knots: the piecewise-linear interpolant of a convex non-decreasing curve
// is one too).

// PoolSamples (K above) is how many samples of its own an engine needs
// for its own curve to weigh as much as its class's.
const PoolSamples = 50.0

// classPool is the sample-weighted mean of one GPU class's profiles of
// one kind: the members are added, then done tabulates the mean once at
// the union of their knots, so pooling every engine of a large class
// costs one pass over the class rather than one per engine.
type classPool struct {
	curves  [][][2]float64
	weights []float64
	total   float64
	mean    [][2]float64 // the class curve at the union of the members' knots
}

func (c *classPool) add(pts [][2]float64, samples float64) {
	if len(pts) == 0 || !(samples > 0) || !finite(samples) {
		return
	}
	c.curves = append(c.curves, pts)
	c.weights = append(c.weights, samples)
	c.total += samples
}

// done tabulates the class curve. Between two consecutive knots of the
// union every member is linear, so the table is the mean curve exactly.
func (c *classPool) done() {
	if c.total <= 0 {
		return
	}
	var us []float64
	for _, pts := range c.curves {
		for _, p := range pts {
			us = append(us, p[0])
		}
	}
	slices.Sort(us)
	us = slices.Compact(us)
	c.mean = make([][2]float64, len(us))
	for k, u := range us {
		var v float64
		for i, pts := range c.curves {
			v += c.weights[i] * interp(pts, u)
		}
		c.mean[k] = [2]float64{u, v / c.total}
	}
	c.curves, c.weights = nil, nil
}

// at is the class curve at u (a tabulated knot exactly as tabulated).
func (c *classPool) at(u float64) float64 {
	if k, ok := slices.BinarySearchFunc(c.mean, u, func(p [2]float64, u float64) int { return cmp.Compare(p[0], u) }); ok {
		return c.mean[k][1]
	}
	return interp(c.mean, u)
}

// pooled returns own blended with its class's curve (see above); own as it
// is when the class has no samples.
func pooled(own [][2]float64, samples float64, class *classPool) [][2]float64 {
	if class == nil || class.total <= 0 || len(own) == 0 {
		return own
	}
	return blend(own, samples, class.at)
}

// blend is (n·own(u) + K·target(u))/(n + K) at own's knots.
func blend(own [][2]float64, samples float64, target func(float64) float64) [][2]float64 {
	n := 0.0
	if samples > 0 && finite(samples) {
		n = samples
	}
	a := n / (n + PoolSamples)
	out := make([][2]float64, len(own))
	for i, p := range own {
		out[i] = [2]float64{p[0], float64(a*p[1]) + float64((1-a)*target(p[0]))}
	}
	return out
}

// requests is the evidence behind e's profiles: the requests it served
// in the window (the TTFT profile's samples). The TBOT profile counts
// tokens, which within one request are far from independent, so it is
// weighed by requests too.
func requests(e *schemas.EngineEstimate) float64 {
	return float64(e.GetTtftProfile().GetSamples())
}

// kind selects one of an engine's two profiles.
type kind int

const (
	ttft kind = iota
	tbot
)

func (k kind) profile(e *schemas.EngineEstimate) *schemas.LatencyProfile {
	if k == ttft {
		return e.GetTtftProfile()
	}
	return e.GetTbotProfile()
}

// profilePools builds the per-class pools of TTFT and TBOT profiles over
// the fresh engine estimates, leaving out the engines whose profile of
// that kind departs from their class (see outliers.go).
func (s *State) profilePools(engines []*schemas.EngineEstimate) (ttftPool, tbotPool map[string]*classPool) {
	ttftPool, tbotPool = map[string]*classPool{}, map[string]*classPool{}
	for _, e := range engines {
		cls := e.GetGpuClass()
		for k, m := range []map[string]*classPool{ttftPool, tbotPool} {
			pool := m[cls]
			if pool == nil {
				pool = &classPool{}
				m[cls] = pool
			}
			if !s.outlier(e.GetEngineId(), kind(k)) {
				pool.add(points(kind(k).profile(e)), requests(e))
			}
		}
	}
	for _, m := range []map[string]*classPool{ttftPool, tbotPool} {
		for _, pool := range m {
			pool.done()
		}
	}
	return ttftPool, tbotPool
}

// plannedProfile is e's profile of kind k as the planner uses it: pooled
// with its class when it agrees with the class, else shrunk toward its
// own last well-measured profile (see outliers.go).
func (s *State) plannedProfile(e *schemas.EngineEstimate, k kind, pools map[string]*classPool) [][2]float64 {
	own, n := points(k.profile(e)), requests(e)
	if m := s.pools[e.GetEngineId()]; m != nil && s.outlier(e.GetEngineId(), k) && len(m.kinds[k].last) > 0 && len(own) > 0 {
		last := m.kinds[k].last
		return blend(own, n, func(u float64) float64 { return interp(last, u) })
	}
	return pooled(own, n, pools[e.GetGpuClass()])
}
