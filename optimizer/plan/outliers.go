package plan

import (
	"math"
	"slices"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Engines that depart from their GPU class.
//
// Pooling (pool.go) assumes the engines of one GPU class share a latency
// curve. An engine declared with a class it does not perform like (a
// different model or quantisation, a throttled or shared GPU, another
// serving stack) breaks that: pooled with a 6× slower peer, a fast engine
// was planned at 566 ms while it answered in 14 ms, and the slow one looked
// fast whenever it was idle. So the planner keeps, per engine and profile
// kind, a deviation from the class:
//
//   - In each window, the class's reference curve is the pointwise median
//     (in log space) of its well-measured members' curves, those with at
//     least MinMeasuredRequests requests; it needs two such members. An
//     engine's deviation d is the mean over its knots of
//     log(own(u)/reference(u)).
//   - The engine's remembered deviation moves toward d with gain
//     n/(n + PoolSamples) for n requests (one window of a long-prompt
//     trace in which an engine drew the long prompts moves it by a
//     fraction; an engine that is slower window after window reaches its
//     true deviation in a few windows).
//   - An engine whose remembered deviation exceeds log(1 + OutlierRatio)
//     (50% slower or faster than its class) is an outlier: it is left out
//     of its class's pool, and its own profile is shrunk (with the same
//     weight n/(n + PoolSamples) on its own samples) toward its own last
//     well-measured profile instead of its class's, so an idle slow
//     engine keeps looking slow.
//   - The memory is dropped when the engine is found down (it comes back
//     as a new instance) and when it is older than PoolMemory windows'
//     time (PoolMemoryMs without a well-measured window).
//
// Engines that agree with their class are pooled exactly as before. The
// state is a deterministic function of the sequence of fresh estimate
// sets the planner builds instances from, each engine window counted once.
const (
	// MinMeasuredRequests is how many requests of its own in one window
	// make an engine's profile a measurement for the outlier test (the
	// processor's threshold for a profile that is not mostly prior).
	MinMeasuredRequests = 20
	// OutlierRatio: an engine whose profile departs from its class's by
	// more than this factor (as 1 + OutlierRatio, either way) is not
	// pooled.
	OutlierRatio = 0.5
	// PoolMemoryMs is how long an engine's deviation and last
	// well-measured profile are kept without a new measurement.
	PoolMemoryMs = 5 * 60 * 1000
)

// poolMemory is one engine's remembered deviation per profile kind.
type poolMemory struct {
	seen  int64 // window end of the last estimate folded in
	kinds [2]kindMemory
}

type kindMemory struct {
	dev     float64      // log deviation from the class
	devEnd  int64        // window end of the last deviation measured
	last    [][2]float64 // last well-measured profile
	lastEnd int64
}

func (m *kindMemory) expire(end int64) {
	if m.devEnd > 0 && end-m.devEnd > PoolMemoryMs {
		m.dev, m.devEnd = 0, 0
	}
	if m.lastEnd > 0 && end-m.lastEnd > PoolMemoryMs {
		m.last, m.lastEnd = nil, 0
	}
}

// outlier reports whether engine id's profile of kind k departs from its
// class (see above).
func (s *State) outlier(id string, k kind) bool {
	m := s.pools[id]
	if m == nil {
		return false
	}
	km := &m.kinds[k]
	return len(km.last) > 0 && math.Abs(km.dev) > math.Log1p(OutlierRatio)
}

// observePools folds the fresh engine estimates (sorted by id) into the
// per-engine memories; an engine window already folded in is skipped.
func (s *State) observePools(fresh []*schemas.EngineEstimate) {
	var todo []*schemas.EngineEstimate
	for _, e := range fresh {
		id, end := e.GetEngineId(), e.GetWindowEndUnixMs()
		m := s.pools[id]
		if m == nil {
			m = &poolMemory{}
			s.pools[id] = m
		}
		if end <= m.seen {
			continue
		}
		m.seen = end
		if e.GetHealth() == schemas.Health_HEALTH_UNHEALTHY || e.GetReadyReplicas() == 0 {
			*m = poolMemory{seen: end}
			continue
		}
		for k := range m.kinds {
			m.kinds[k].expire(end)
		}
		todo = append(todo, e)
	}
	for k := range []kind{ttft, tbot} {
		byClass := map[string][]*schemas.EngineEstimate{}
		for _, e := range fresh {
			if requests(e) >= MinMeasuredRequests && len(points(kind(k).profile(e))) > 0 {
				byClass[e.GetGpuClass()] = append(byClass[e.GetGpuClass()], e)
			}
		}
		ref := map[string][][2]float64{}
		for _, cls := range sortedKeys(byClass) {
			if ms := byClass[cls]; len(ms) >= 2 {
				curves := make([][][2]float64, len(ms))
				for i, e := range ms {
					curves[i] = points(kind(k).profile(e))
				}
				ref[cls] = medianCurve(curves)
			}
		}
		for _, e := range todo {
			n := requests(e)
			own := points(kind(k).profile(e))
			if n < MinMeasuredRequests || len(own) == 0 {
				continue
			}
			km := &s.pools[e.GetEngineId()].kinds[k]
			km.last, km.lastEnd = own, e.GetWindowEndUnixMs()
			r := ref[e.GetGpuClass()]
			if r == nil {
				continue
			}
			if d, ok := logDeviation(own, r); ok {
				km.dev += float64(n / (n + PoolSamples) * (d - km.dev))
				km.devEnd = e.GetWindowEndUnixMs()
			}
		}
	}
}

// medianCurve is the pointwise median in log space (for an even count the
// geometric mean of the middle two) of curves at the union of their knots.
func medianCurve(curves [][][2]float64) [][2]float64 {
	var us []float64
	for _, c := range curves {
		for _, p := range c {
			us = append(us, p[0])
		}
	}
	slices.Sort(us)
	us = slices.Compact(us)
	out := make([][2]float64, 0, len(us))
	vs := make([]float64, len(curves))
	for _, u := range us {
		vs = vs[:0]
		for _, c := range curves {
			if v := interp(c, u); v > 0 && finite(v) {
				vs = append(vs, math.Log(v))
			}
		}
		if len(vs) == 0 {
			continue
		}
		slices.Sort(vs)
		m := len(vs) / 2
		med := vs[m]
		if len(vs)%2 == 0 {
			med = (vs[m-1] + vs[m]) / 2
		}
		out = append(out, [2]float64{u, math.Exp(med)})
	}
	return out
}

// logDeviation is the mean over own's knots of log(own(u)/ref(u)).
func logDeviation(own, ref [][2]float64) (float64, bool) {
	if len(ref) == 0 {
		return 0, false
	}
	var sum float64
	var n int
	for _, p := range own {
		if r := interp(ref, p[0]); p[1] > 0 && r > 0 && finite(p[1]) && finite(r) {
			sum += math.Log(p[1] / r)
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}
