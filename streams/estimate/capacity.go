package estimate

import "math"

// Capacity of one window.
//
// A continuous-batching engine saturates on compute (prefill token budget,
// decode steps slowing with the batch) long before its batch or KV cache
// is full. A single window can only say two things about capacity:
//
//   - a window in which the engine kept a real waiting queue ran at
//     capacity, so its throughput measures capacity (capacity_rps equals
//     observed_rps: consumers read that equality as "measured");
//   - any other window proves only that capacity is above its throughput;
//     the estimate is then the occupancy guess (throughput over
//     max(running / max batch, KV usage), blended toward the GPU-class
//     prior at low occupancy), right for an engine bound by its batch or
//     KV cache but 2–3× too high for one bound by compute.
//
// Smoothing across windows (trusting measurements, holding the estimate
// at light load) is the planner's job (optimizer/plan), so that each
// window's estimates stay a pure function of its records.
const (
	// A window ran at capacity when its mean waiting queue is at least
	// saturatedWaiting requests and, by Little's law, delays admission by
	// at least saturatedDelay seconds on average (mean waiting / finished
	// rate). The delay rule keeps the short queue a continuous-batching
	// engine forms whenever a step's prefill token budget is spent (a few
	// requests for one step) from counting as saturation.
	saturatedWaiting = 1.0
	saturatedDelay   = 0.5
	// guessUtil: below this occupancy the guess leans on the prior.
	guessUtil = 0.3
)

// windowCapacity is what one window says about an engine's capacity.
type windowCapacity struct {
	rps, waiting float64 // finished requests/s, mean waiting queue
	replicas     float64
	healthy      bool
	prior        float64 // per-replica prior rps
	util         float64 // mean max(running / max batch, KV usage)
}

// saturated: the window ran at capacity.
func (w windowCapacity) saturated() bool {
	return w.rps > 0 && w.waiting >= saturatedWaiting && w.waiting >= saturatedDelay*w.rps
}

// guess is the occupancy-based capacity of one replica serving x rps.
func (w windowCapacity) guess(x float64) float64 {
	if !finite(x) || x <= 0 || !finite(w.util) || w.util <= 0 {
		return w.prior
	}
	g := math.Min(1, w.util/guessUtil)
	return g*x/math.Max(w.util, guessUtil) + (1-g)*math.Max(w.prior, x)
}

// capacity is the window's capacity estimate (rps, all replicas).
func (w windowCapacity) capacity() float64 {
	var c float64
	switch {
	case !w.healthy || w.replicas <= 0:
		c = 0
	case w.saturated():
		c = w.rps
	default:
		c = w.replicas * w.guess(w.rps/w.replicas)
	}
	if !finite(c) || c < 0 {
		return 0
	}
	return c
}
