package admit

import (
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Engine is one engine's admission state at one gateway: its batch limit
// as its signals tell it, what probing found missing from it, and the
// Limiter its limit falls back to when no batch limit is known. The
// gateway keeps one per engine and the simulator's gateways do too: the
// rules live here once. Safe for concurrent use.
type Engine struct {
	lim *Limiter
	// batch is the batch limit over the replicas as the signals tell it
	// (max_batch, or inferred; 0: unknown); probe is slots added to a
	// batch limit that an idle engine showed to be too low; signals
	// counts the signals, probed is signals when probe last grew.
	batch, probe, signals, probed atomic.Int64
	// idle: the last signal showed no request waiting in the engine's
	// own queue; held: Limit last found it held below its batch limit
	// while idle.
	idle, held atomic.Bool
}

// NewEngine returns an engine whose fallback Limiter starts at
// cfg.Initial (or initial, when positive).
func NewEngine(cfg Config, initial int) *Engine {
	return &Engine{lim: NewLimiter(cfg, initial)}
}

// Limiter returns the fallback limiter.
func (e *Engine) Limiter() *Limiter { return e.lim }

// NoteSignal learns from one of the engine's signals, down telling
// whether it says the engine is down: the batch limit
// (BatchFromSignal), whether requests wait in its own queue, and, once
// they do (its limit shows) or it went down, the end of probing.
func (e *Engine) NoteSignal(s *schemas.EngineSignal, down bool) {
	e.batch.Store(BatchFromSignal(e.batch.Load(), s, down))
	e.idle.Store(!down && s.GetWaitingRequests() < 1)
	if down || s.GetWaitingRequests() >= 1 {
		e.probe.Store(0)
	}
	e.signals.Add(1)
}

// FreeSlot reports whether a request sent to the engine now would start
// at once as far as this gateway can tell: its batch limit is known
// (snapshot's or its signals'), inFlight (this gateway's requests there)
// is below it, and its last signal showed nobody waiting in its own
// queue (other gateways' requests fill slots too). False before any
// signal.
func (e *Engine) FreeSlot(snapshot int, inFlight int64) bool {
	n := e.Slots(snapshot)
	return n > 0 && inFlight < n && e.signals.Load() > 0 && e.idle.Load()
}

// Slots returns the engine's batch limit (0: unknown): the larger of
// snapshot's (the plan's max_concurrency; a plan may give an engine its
// GPU class peers' limit until its own shows, and the gateway must not
// hold it below its own) and its signals', plus what probing found.
func (e *Engine) Slots(snapshot int) int64 {
	n := max(int64(snapshot), e.batch.Load())
	if n <= 0 {
		return 0
	}
	return n + e.probe.Load()
}

// Load is what a gateway has on an engine and in its queue when it sets
// the engine's limit.
type Load struct {
	InFlight int64 // this gateway's requests on the engine
	Queued   int   // requests waiting in this gateway's Queue
}

// Limit returns the engine's limit under l (0: none) and its batch
// limit (0: unknown), for a plan giving it snapshot slots. With update
// (the gateway's tick) it first probes — raising a batch limit by a
// quarter, at most to four times the known one, when the limit binds
// (ld.Queued > 0 and ld.InFlight at the limit) while the engine's
// latest signal, one not probed on yet, showed no queue of its own: its
// batch limit is then higher than known, and only more requests show by
// how much, after which its signals tell it — and, when no batch limit
// is known and l.Adaptive, updates the Limiter.
func (e *Engine) Limit(l Limits, snapshot int, ld Load, now time.Time, update bool) (limit, slots int64) {
	slots = e.Slots(snapshot)
	if update {
		e.maybeProbe(l, snapshot, slots, ld)
		slots = e.Slots(snapshot)
	}
	n := 0
	if slots <= 0 {
		n = e.lim.Limit()
		if update && l.Adaptive {
			n = e.lim.Update(now)
		}
	}
	return l.Limit(slots, n), slots
}

func (e *Engine) maybeProbe(l Limits, snapshot int, slots int64, ld Load) {
	base := max(int64(snapshot), e.batch.Load())
	eff := l.Limit(slots, 0)
	if base <= 0 || !e.idle.Load() || ld.InFlight < eff || ld.Queued == 0 || l.Static > 0 && eff >= l.Static {
		return
	}
	if seq := e.signals.Load(); e.probed.Swap(seq) != seq && slots < 4*base {
		e.probe.Add(max(base/4, 1))
	}
}

// Held reports whether the engine is held below its batch limit
// (slots) by its limit while it has no queue of its own — inFlight
// requests there, as many as the limit, and its last signal showed none
// waiting (with batch limits known, only a Limits.Static below them can
// do that) — and whether that changed since the last call.
func (e *Engine) Held(slots, limit, inFlight int64) (held, changed bool) {
	held = slots > 0 && limit > 0 && limit < slots && inFlight >= limit && e.idle.Load()
	return held, e.held.Swap(held) != held
}

// Attempt is one attempt's outcome on an engine, as Observe reads it.
type Attempt struct {
	Started time.Time
	// Refused: the engine turned it away as saturated (429, 503) or it
	// timed out (first token or idle).
	Refused bool
	// FirstToken: a streamed first token arrived after TTFT, the
	// engine's own time (network and queueing removed).
	FirstToken bool
	TTFT       time.Duration
	// Whole: a whole (non-streamed) response of OutputTokens took
	// Duration at the engine.
	Whole        bool
	Duration     time.Duration
	OutputTokens int
	// InFlight is the requests in flight on the engine when it ended,
	// this one included.
	InFlight int64
}

// Observe feeds one attempt to the fallback Limiter, unless the engine's
// limit comes from a batch limit (snapshot slots or its signals').
func (e *Engine) Observe(snapshot int, a Attempt) {
	if snapshot > 0 || e.batch.Load() > 0 {
		return
	}
	switch {
	case a.Refused:
		e.lim.Drop(a.Started)
	case a.FirstToken:
		e.lim.Sample(TTFT, a.TTFT, a.Started, a.InFlight)
	case a.Whole:
		e.lim.Sample(PerToken, a.Duration/(time.Duration(a.OutputTokens)+1), a.Started, a.InFlight)
	}
}

// Capacity sums the limits of a gateway's engines into its Queue's
// capacity: the available engines' (of all engines when none is
// available). The zero value is empty.
type Capacity struct{ avail, all int64 }

// Add counts one engine's limit.
func (c *Capacity) Add(limit int64, available bool) {
	c.all += limit
	if available {
		c.avail += limit
	}
}

// Total returns the capacity (0: no limit).
func (c *Capacity) Total() int {
	if c.avail == 0 {
		return int(c.all)
	}
	return int(c.avail)
}
