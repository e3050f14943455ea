package estimate

import "math"

// Capacity of one window.
//
// A continuous-batching engine saturates on compute (the prefill of
// prompt tokens that miss the prefix cache, and decode steps) long before
// its batch or KV cache is full, and how many requests per second that is
// depends on the token mix: a 10k-token prompt costs a hundred times what
// a 100-token one does. So capacity is reasoned about in work, then
// converted to requests at the window's own mix:
//
//   - a request's work, in seconds of one replica, is its uncached prompt
//     tokens over the GPU class's prefill rate plus its generated tokens
//     over its decode rate (Prior.PrefillTokensPerS, DecodeTokensPerS),
//     from the window's token counters: prompt tokens per prefill
//     completed (the TTFT histogram's count, which is observed at the
//     first token, so the count does not lag the work as finished
//     requests do), times the prefix-cache miss rate, and generated
//     tokens per finished request;
//   - a window in which the engine kept a real waiting queue (seen in
//     more than one scrape) ran at
//     capacity, so its throughput (prefills completed per second) measures
//     capacity (capacity_rps equals observed_rps: consumers read that
//     equality as "measured");
//   - any other window proves only that capacity is above its throughput;
//     the estimate is then the prior's sustainable work (one second of
//     work per second per replica) divided by the work per request — the
//     GPU-class prior is trusted as the upper bound until a measurement
//     says otherwise — and never below the throughput;
//   - a window without the token counters falls back to the occupancy
//     guess (throughput over max(running / max batch, KV usage), blended
//     toward the prior's request rate at low occupancy);
//   - whatever the case, capacity is at most what the batch limit allows:
//     by Little's law a request stays running/throughput seconds, and at
//     most batch requests per replica run at once (and each stays no
//     shorter at a fuller batch), so capacity <= throughput × batch /
//     running (per replica). The batch limit is the engine's (configured
//     or exported), else inferred from a queue at a running plateau, else
//     the GPU class's prior (Engine.batchLimit), and never below the most
//     the engine ran, so the bound is never below the throughput.
//
// Smoothing across windows (trusting measurements, holding the estimate
// at light load) is the planner's job (optimizer/plan), so that each
// window's estimates stay a pure function of its records.
const (
	// A window ran at capacity when its mean waiting queue is at least
	// saturatedWaiting requests and, by Little's law, delays admission by
	// at least saturatedDelay seconds on average (mean waiting / request
	// rate). The delay rule keeps the short queue a continuous-batching
	// engine forms whenever a step's prefill token budget is spent (a few
	// requests for one step) from counting as saturation.
	saturatedWaiting = 1.0
	saturatedDelay   = 0.5
	// saturatedScrapes: and at least this many of the window's scrapes
	// saw a queue. One scrape is an instant: a request that arrived just
	// before it waits for the next step, and an engine's first window
	// (often one scrape, at start-up or after a restart) averaged over
	// that one instant read as a queue kept all window. Such a window
	// published an H100 serving 1 request/s as measured at 1 rps of
	// capacity, and the planner, which trusts measurements, kept it near
	// there for minutes (optimizer/plan/capacity.go).
	saturatedScrapes = 2
	// guessUtil: below this occupancy the guess leans on the prior.
	guessUtil = 0.3
)

// windowCapacity is what one window says about an engine's capacity.
type windowCapacity struct {
	rps, waiting float64 // requests/s (prefills completed), mean waiting queue
	waitScrapes  int     // scrapes of the window that saw a queue
	replicas     float64
	healthy      bool
	prior        float64 // per-replica prior rps
	util         float64 // mean max(running / max batch, KV usage)
	// work is the replica-seconds of work per request at the window's
	// token mix (0: unknown).
	work float64
	// batch is the per-replica batch limit and running the mean running
	// requests per replica (0: no bound).
	batch, running float64
}

// saturated: the window ran at capacity.
func (w windowCapacity) saturated() bool {
	return w.rps > 0 && w.waitScrapes >= saturatedScrapes && w.waiting >= saturatedWaiting && w.waiting >= saturatedDelay*w.rps
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
	case finite(w.work) && w.work > 0:
		c = math.Max(w.replicas/w.work, w.rps)
	default:
		c = w.replicas * w.guess(w.rps/w.replicas)
	}
	if w.batch > 0 && w.running > 0 && w.rps > 0 {
		c = math.Min(c, w.rps*math.Max(1, w.batch/w.running))
	}
	if !finite(c) || c < 0 {
		return 0
	}
	return c
}

// workPerRequest is the replica-seconds of work of one request at a
// window's token mix (see the comment at the top): prompt tokens per
// prefill completed and the prefix-cache miss rate, generated tokens per
// finished request (per prefill when fewer finished). 0 when the window has no completed prefill.
func workPerRequest(p Prior, prompt, prefills, missRate, gen, finished float64) float64 {
	if !(prefills > 0) || !(p.PrefillTokensPerS > 0) || !(p.DecodeTokensPerS > 0) || !finite(prompt) || prompt < 0 {
		return 0
	}
	missRate = math.Min(1, math.Max(0, missRate))
	w := prompt / prefills * missRate / p.PrefillTokensPerS
	if finite(gen) && gen >= 0 {
		w += gen / math.Max(finished, prefills) / p.DecodeTokensPerS
	}
	if !finite(w) || w <= 0 {
		return 0
	}
	return w
}
