package plan

import (
	"math"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Capacity carried across windows.
//
// Each window's engine estimate either measured capacity (the engine kept
// a waiting queue, so its throughput is its capacity: the processor then
// publishes capacity_rps = observed_rps) or only proves capacity is above
// the window's throughput, with an occupancy-based guess that is 2–3× too
// high for a compute-bound engine (see streams/estimate). Planning on the
// raw per-window value makes the estimate alternate with the load the
// plan itself puts on the engine (high below saturation, throughput above
// it), and the weights follow.
//
// The planner therefore keeps, per engine, a per-replica capacity that
//   - starts at the first window's estimate;
//   - moves halfway toward each measurement (never below it);
//   - is raised to probeStep × throughput when a window runs the engine at
//     probeLoad or more of the estimate without a queue (the load proves
//     capacity is at least the throughput; the step probes above it, and a
//     later measurement corrects an overshoot);
//   - otherwise holds;
//   - is forgotten when a window finds the engine down (unhealthy, or no
//     ready replica): it comes back as a new instance with a cold prefix
//     cache, so what was learned about the old one (measured on warm
//     caches) overstates it, and it starts over from its first window
//     whose signals were healthy throughout (a degraded window after the
//     engine was down still counts the time it was down or starting: its
//     throughput and occupancy, read over the whole window, understate
//     the engine; live, a restarted engine seeded from one was planned at
//     0.40 of its region's traffic instead of 0.65 for four windows while
//     the smoothed bound climbed back, bench/live SCENARIO=restart);
//     and when no estimate updated it for capacityMemoryMs (5 minutes).
//
// The tracked capacity is in work, not requests, wherever the estimates
// say how much work a request of their window took (work_per_request_s:
// replica-seconds at the GPU class's prior rates; every engine estimate
// from windows with the token counters): capacity_rps ×
// work_per_request_s is replica-seconds per second, which does not depend
// on the token mix. In requests, an engine's capacity is that of the
// prompts it happened to draw: on a long-prompt trace (Mooncake, 1k to
// 120k-token prompts) a measurement made while one 100k-token prompt
// queued others pinned the engine at half its identical twin's capacity
// until the next measurement, the planned utilisations of identical
// engines differed by 2× and the weights followed whichever engine had
// been measured last (903 weight reversals in the Mooncake hour; 581 in
// work, p99 TTFT and goodput unchanged: docs/sim.md#matrix). The planner
// converts the tracked work back to requests at its GPU class's reference
// mix: the mean work per request the class's fresh engines served,
// weighted by their throughput (unweighted when none served any), so
// engines of one class are planned at one mix, the one they serve
// together. A window without the work figure teaches a work-tracking
// engine nothing: an idle engine's (no prefill completed) keeps what it
// learned alive; a busy one's (its token counters went away) does not,
// so after capacityMemoryMs it starts over in requests. An engine whose
// estimates never carry one is tracked in requests as before.
//
// The state is a deterministic function of the sequence of engine
// estimates (each window counted once, in window order), so replaying the
// same estimate history reproduces it.
const (
	measureGain = 0.5
	probeLoad   = 0.6
	probeStep   = 1.5
	boundGain   = 0.2
	// unmeasuredHeadroom: the share of an unmeasured engine's bound the
	// planner plans on while demand fits (see capacity).
	unmeasuredHeadroom = 0.85
	// capacityMemoryMs: a tracked capacity not updated for this long is
	// forgotten (the engine starts over from its next estimate).
	capacityMemoryMs = 5 * 60 * 1000
	// residencyGain: how far each window moves the tracked rate at which
	// the engine's prefix cache turns over (1 / cache_residency_s) toward
	// the window's. A 10 s window's residency swings tenfold with whether
	// one long prompt arrived in it, while a cached prefix lives about a
	// minute or more: 0.05 a window averages over about 20 windows (40 s
	// at a 2 s slide).
	residencyGain = 0.05
	// residencyBand: the published residency follows the tracked one
	// once they differ by more than this share (see residency).
	residencyBand = 0.1
	// refGain: how far each window moves a GPU class's tracked reference
	// work per request toward the window's; refBand: the reference
	// planned on follows the tracked one once they differ by more than
	// this share, so capacities in requests stay put while the mix does.
	refGain = 0.2
	refBand = 0.1
)

type capacityState struct {
	lastEnd    int64   // window end of the last estimate folded in
	replicaRPS float64 // per-replica capacity
	measured   bool    // a window has measured capacity
	// batch is the latest per-replica batch limit known from evidence
	// (configured, engine metrics or inferred; not the class prior): an
	// inferred limit shows only in windows where requests waited, and it
	// holds until the engine is found down or not heard of for
	// capacityMemoryMs.
	batch uint32
	// turnover is 1 / cache residency (per second), tracked across
	// windows with residencyGain; 0: unknown. published is the residency
	// the plan publishes: the tracked one once it departs from the last
	// published by more than residencyBand (see residency).
	turnover  float64
	published float64
	// work: replicaRPS is in replica-seconds of work per second (the
	// estimates carry work_per_request_s), not requests.
	work bool
	// returning: found down, and no window since was healthy throughout;
	// such windows teach nothing (see the comment at the top).
	returning bool
}

// observe folds e in (a window not newer than the last one is ignored).
func (s *capacityState) observe(e *schemas.EngineEstimate) {
	if s.replicaRPS > 0 && e.GetWindowEndUnixMs() <= s.lastEnd {
		return
	}
	c, x := e.GetCapacityRps(), e.GetObservedRps()
	if e.GetHealth() == schemas.Health_HEALTH_UNHEALTHY || e.GetReadyReplicas() == 0 {
		// Down: it comes back as a new instance with a cold cache.
		*s = capacityState{lastEnd: e.GetWindowEndUnixMs(), returning: true}
		return
	}
	if s.returning && e.GetHealth() == schemas.Health_HEALTH_DEGRADED {
		return // still counts time down or starting: nothing learned
	}
	s.returning = false
	if s.lastEnd > 0 && e.GetWindowEndUnixMs()-s.lastEnd > capacityMemoryMs {
		*s = capacityState{} // not heard of for too long: start over
	}
	if src := e.GetCapacitySource(); src != "" && src != "prior" && e.GetMaxBatch() > 0 {
		s.batch = e.GetMaxBatch()
	}
	if r := e.GetCacheResidencyS(); r > 0 && finite(r) {
		if x := 1 / r; s.turnover <= 0 {
			s.turnover = x
		} else {
			s.turnover += float64(residencyGain * (x - s.turnover))
		}
		if t := 1 / s.turnover; !(s.published > 0) || math.Abs(t-s.published) > residencyBand*s.published {
			s.published = t
		}
	}
	if !finite(c) || c <= 0 || !finite(x) {
		return // nothing learned
	}
	if w := e.GetWorkPerRequestS(); finite(w) && w > 0 {
		if !s.work && s.replicaRPS > 0 {
			// Tracked in requests so far: start over in work.
			s.replicaRPS, s.measured = 0, false
		}
		s.work = true
		c, x = c*w, x*w
	} else if s.work {
		if x == 0 {
			s.lastEnd = e.GetWindowEndUnixMs() // idle: alive, nothing learned
		}
		// Served without a work figure (the engine's token counters
		// went away): nothing learned, and after capacityMemoryMs of
		// that the engine starts over in requests.
		return
	}
	s.lastEnd = e.GetWindowEndUnixMs()
	r := float64(e.GetReadyReplicas())
	perRep, xr := c/r, x/r
	if !finite(xr) || xr < 0 {
		xr = 0
	}
	switch {
	case xr > 0 && c <= x*(1+1e-9): // measured
		if s.replicaRPS <= 0 || !finite(s.replicaRPS) {
			s.replicaRPS = xr
		} else {
			s.replicaRPS = math.Max(xr, s.replicaRPS+float64(measureGain*(xr-s.replicaRPS)))
		}
		s.measured = true
	case s.replicaRPS <= 0 || !finite(s.replicaRPS):
		s.replicaRPS = perRep
	case !s.measured: // the estimate's bound until measured, smoothed
		s.replicaRPS += float64(boundGain * (perRep - s.replicaRPS))
	case xr >= probeLoad*s.replicaRPS:
		s.replicaRPS = math.Max(s.replicaRPS, math.Min(probeStep*xr, perRep))
	}
}

// capacity is the tracked capacity of e's engine (all ready replicas) in
// requests per second, work converted at refWork seconds a request (the
// class's reference mix), or e's own estimate when nothing is tracked or
// no reference is known: lo is what the planner plans on, hi the most it
// may plan on rather than shed. They differ only for an engine never
// measured, whose estimate is a bound from the GPU-class prior at the
// current token mix: lo keeps unmeasuredHeadroom of it in reserve for
// traffic whose mix differs (a failover's prompts arrive with cold prefix
// caches).
func (s *capacityState) capacity(e *schemas.EngineEstimate, refWork float64) (lo, hi float64) {
	if s == nil || s.replicaRPS <= 0 || !finite(s.replicaRPS) || s.work && !(refWork > 0 && finite(refWork)) {
		return e.GetCapacityRps(), e.GetCapacityRps()
	}
	hi = s.replicaRPS * float64(max(e.GetReadyReplicas(), 1))
	if s.work {
		hi /= refWork
	}
	if s.measured {
		return hi, hi
	}
	return unmeasuredHeadroom * hi, hi
}

// residency is the prefix-cache residency of the engine the plan
// publishes, in seconds (0: unknown): the tracked residency, held while
// it stays within residencyBand of the value last published. The tracked
// value moves a little every window (residencyGain), and a published
// value that changes every window makes every snapshot a new plan to
// the gateways (a new table, 0.35 ms of a gateway's CPU at 1,000
// engines, where an unchanged plan costs 0.06: docs/optimizer.md,
// fan-out); a prefix's survival is not known to 10% anyway
// (docs/notes/2026-12-picker.md).
func (s *capacityState) residency() float64 {
	if s == nil || !(s.published > 0) || !finite(s.published) {
		return 0
	}
	return s.published
}

// refState is one GPU class's reference work per request (see above),
// tracked across windows: it moves refGain of the way toward each
// window's, so one window's long prompts do not move every engine of the
// class at once.
type refState struct {
	end  int64   // newest window end folded in
	w    float64 // seconds of work per request, tracked
	held float64 // the tracked value planned on (refBand)
}

// observeRef folds the reference work per request of each GPU class in
// fresh (the throughput-weighted mean of work_per_request_s over the
// class's engines that carry one, or their plain mean when none served
// anything) into s.refWork, once per window (the class's newest window
// end among them).
func (s *State) observeRef(fresh []*schemas.EngineEstimate) {
	type sums struct {
		wx, x, w, n float64
		end         int64
	}
	by := map[string]*sums{}
	for _, e := range fresh {
		w, x := e.GetWorkPerRequestS(), e.GetObservedRps()
		if !finite(w) || w <= 0 {
			continue
		}
		if !finite(x) || x < 0 {
			x = 0
		}
		c := by[e.GetGpuClass()]
		if c == nil {
			c = &sums{}
			by[e.GetGpuClass()] = c
		}
		c.wx += float64(w * x)
		c.x += x
		c.w += w
		c.n++
		c.end = max(c.end, e.GetWindowEndUnixMs())
	}
	var newest int64
	for _, k := range sortedKeys(by) {
		c := by[k]
		newest = max(newest, c.end)
		w := c.w / c.n
		if c.x > 0 {
			w = c.wx / c.x
		}
		if !finite(w) || w <= 0 {
			continue // an overflowing sum: this window says nothing
		}
		st := s.refWork[k]
		switch {
		case st == nil:
			s.refWork[k] = &refState{end: c.end, w: w, held: w}
		case c.end > st.end:
			st.w += float64(refGain * (w - st.w))
			st.end = c.end
			if !finite(st.w) || st.w <= 0 {
				st.w = w
			}
			if math.Abs(st.w-st.held) > refBand*st.held {
				st.held = st.w
			}
		}
	}
	// A class none of whose engines carried a work figure for
	// capacityMemoryMs is forgotten, as its engines' capacities are.
	for k, st := range s.refWork {
		if newest-st.end > capacityMemoryMs {
			delete(s.refWork, k)
		}
	}
}

// reference returns the tracked reference work per request of each GPU
// class.
func (s *State) reference() map[string]float64 {
	ref := make(map[string]float64, len(s.refWork))
	for k, st := range s.refWork {
		ref[k] = st.held
	}
	return ref
}

// spendHeadroom is the utilization cap the plan is solved at: maxU while
// the demand fits under it, else as much more as the demand needs, up to
// the whole capacity. MaxUtilization is latency headroom, not capacity:
// a demand between maxU × capacity and capacity is one the fleet can
// serve, and shedding the part above maxU refused requests an engine had
// room for (bench/live at 0.9× the fleet's capacity: 3% of requests
// answered 429 by the plan while nginx least_conn served all of them).
// So the headroom is spent before any request is shed, and the plan
// sheds only what exceeds the capacity it estimates; the gateways'
// admission (batch slots and a bounded queue) absorbs what the estimate
// gets wrong either way.
func spendHeadroom(maxU, demand, capacity float64) float64 {
	if !(capacity > 0) || !finite(demand) || demand <= maxU*capacity {
		return maxU
	}
	return math.Min(1, demand/capacity)
}
