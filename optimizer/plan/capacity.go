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
//     caches) overstates it, and it starts over from its next window;
//     and when no estimate updated it for capacityMemoryMs (5 minutes).
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
}

// observe folds e in (a window not newer than the last one is ignored).
func (s *capacityState) observe(e *schemas.EngineEstimate) {
	if s.replicaRPS > 0 && e.GetWindowEndUnixMs() <= s.lastEnd {
		return
	}
	c, x := e.GetCapacityRps(), e.GetObservedRps()
	if e.GetHealth() == schemas.Health_HEALTH_UNHEALTHY || e.GetReadyReplicas() == 0 {
		// Down: it comes back as a new instance with a cold cache.
		*s = capacityState{lastEnd: e.GetWindowEndUnixMs()}
		return
	}
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

// capacity is the tracked capacity of e's engine (all ready replicas), or
// e's own estimate when nothing is tracked: lo is what the planner plans
// on, hi the most it may plan on rather than shed. They differ only for an
// engine never measured, whose estimate is a bound from the GPU-class
// prior at the current token mix: lo keeps unmeasuredHeadroom of it in
// reserve for traffic whose mix differs (a failover's prompts arrive with
// cold prefix caches).
func (s *capacityState) capacity(e *schemas.EngineEstimate) (lo, hi float64) {
	if s == nil || s.replicaRPS <= 0 || !finite(s.replicaRPS) {
		return e.GetCapacityRps(), e.GetCapacityRps()
	}
	hi = s.replicaRPS * float64(max(e.GetReadyReplicas(), 1))
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
