// Package admit is the gateway's admission control: a concurrency limit
// per engine in batch slots (Limits; learned from the engine's latency by
// a Limiter only when its batch limit is unknown), and a bounded priority
// queue with a deadline in front of the engines (Queue), so that overload
// turns into fast 429s instead of engine queues and timeouts, while below
// capacity nothing is rejected. The simulator runs the same code on its
// virtual clock (Queue.Offer).
//
// # Limiter
//
// A Limiter, the fallback for engines whose batch limit is unknown, is
// a gradient limiter in the style of Netflix's
// concurrency-limits and Envoy's adaptive concurrency filter, adapted to
// LLM engines. An engine serves up to its batch limit at once; beyond it
// requests wait in the engine's queue for whole requests to finish, so
// their time to first token jumps from the prefill time to seconds. The
// limiter samples each request's engine latency (the TTFT of a streamed
// response; the time per output token of a whole one), averages it over a
// window (one Update, every 250 ms in the gateway) and compares it with a
// baseline, the lowest window mean of the last BaselineWindow:
//
//	gradient = clamp(tolerance · baseline / mean, 0.5, 1)
//	limit    = limit · gradient               (gradient < 1)
//	limit    = limit + sqrt(limit)            (gradient = 1, limit in use)
//	limit    = limit · 1.5                    (the same, before the first decrease)
//
// An engine that turned a request away as saturated (429, 503) or timed
// out multiplies the limit by Backoff. The limit does not grow unless the
// engine's requests in flight reached 90% of it (nothing was learned
// about more). The baseline being a windowed minimum, not a long-term
// average, the limit cannot drift upwards under sustained overload (the
// known weakness of an average: it rises with the queue it should detect).
//
// A request's latency is known only when it ends, seconds after it
// started for an LLM. So that the limit does not run ahead of its own
// feedback (and then collapse on stale samples), a window counts only
// requests that started after the limit last changed: the limit moves at
// most once per round trip of the engine's requests.
package admit

import (
	"math"
	"sync"
	"time"
)

// Kind is a latency sample's kind; each kind has its own baseline.
type Kind uint8

// Kinds of samples.
const (
	// TTFT is the engine's time to first token of a streamed response.
	TTFT Kind = iota
	// PerToken is a whole (non-streamed) response's engine time divided
	// by its output tokens plus one.
	PerToken
	kinds
)

// Config tunes limiters. Zero values take the defaults.
type Config struct {
	// Initial is the limit before any sample. Default 32.
	Initial int
	// Min and Max bound the limit. Defaults 2 and 4096.
	Min, Max int
	// Tolerance is how many times its baseline a window's mean TTFT may
	// reach before the limit shrinks. Default 2 (a request waiting for a
	// batch slot waits for a whole request to end: many times a prefill).
	Tolerance float64
	// TokenTolerance is the same for the time per output token of whole
	// responses. Default 1.3 (a queue adds to the whole response, but
	// only in proportion to its length).
	TokenTolerance float64
	// Backoff multiplies the limit when the engine turned a request away
	// as saturated or timed out. Default 0.8.
	Backoff float64
	// MinSamples is the samples a window needs to move the limit, and
	// at least a quarter of the limit (the first requests to end after a
	// change are the ones that did not queue); smaller windows carry over
	// to the next Update. Default 4.
	MinSamples int
	// BaselineWindow is how long a window mean stays the baseline.
	// Default 30s.
	BaselineWindow time.Duration
}

func (c *Config) defaults() {
	if c.Initial <= 0 {
		c.Initial = 32
	}
	if c.Min <= 0 {
		c.Min = 2
	}
	if c.Max <= 0 {
		c.Max = 4096
	}
	if c.Max < c.Min {
		c.Max = c.Min
	}
	c.Initial = min(max(c.Initial, c.Min), c.Max)
	if !(c.Tolerance >= 1) || math.IsInf(c.Tolerance, 0) {
		c.Tolerance = 2
	}
	if !(c.TokenTolerance >= 1) || math.IsInf(c.TokenTolerance, 0) {
		c.TokenTolerance = 1.3
	}
	if !(c.Backoff > 0 && c.Backoff < 1) {
		c.Backoff = 0.8
	}
	if c.MinSamples <= 0 {
		c.MinSamples = 4
	}
	if c.BaselineWindow <= 0 {
		c.BaselineWindow = 30 * time.Second
	}
}

// baselineBuckets is the resolution of the windowed minimum.
const baselineBuckets = 6

// minFilter is a windowed minimum: the least value of the last window,
// kept in buckets of window/baselineBuckets.
type minFilter struct {
	epoch [baselineBuckets]int64
	min   [baselineBuckets]float64
}

func (f *minFilter) add(v float64, now time.Time, window time.Duration) {
	w := int64(window / baselineBuckets)
	e := now.UnixNano() / w
	i := int(e % baselineBuckets)
	if f.epoch[i] != e || f.min[i] == 0 || v < f.min[i] {
		if f.epoch[i] != e {
			f.min[i] = v
		} else {
			f.min[i] = min(f.min[i], v)
		}
		f.epoch[i] = e
	}
}

func (f *minFilter) get(now time.Time, window time.Duration) float64 {
	e := now.UnixNano() / int64(window/baselineBuckets)
	best := 0.0
	for i := range f.min {
		if f.min[i] > 0 && e-f.epoch[i] < baselineBuckets && (best == 0 || f.min[i] < best) {
			best = f.min[i]
		}
	}
	return best
}

// Limiter is one engine's adaptive concurrency limit. Sample and Drop
// are called per request (a mutex around a few additions); Update
// recomputes the limit, a few times a second. Safe for concurrent use.
type Limiter struct {
	cfg Config

	mu        sync.Mutex
	limit     float64
	slowStart bool
	sum       [kinds]float64
	n         [kinds]int
	drops     int
	peak      int64 // most requests in flight seen by Sample this window
	base      [kinds]minFilter
	changed   time.Time // when the limit last changed
}

// NewLimiter returns a limiter starting at cfg.Initial (or initial, when
// positive: e.g. the engine's batch limit from the snapshot).
func NewLimiter(cfg Config, initial int) *Limiter {
	cfg.defaults()
	l := &Limiter{cfg: cfg, limit: float64(cfg.Initial), slowStart: true}
	if initial > 0 {
		l.limit = float64(min(max(initial, cfg.Min), cfg.Max))
	}
	return l
}

// Sample records the engine latency of kind k (ignored unless positive)
// of a request that started at started, and the requests in flight on
// the engine when it ended (this one included).
func (l *Limiter) Sample(k Kind, latency time.Duration, started time.Time, inflight int64) {
	if k >= kinds || latency <= 0 {
		return
	}
	l.mu.Lock()
	l.peak = max(l.peak, inflight)
	if !started.Before(l.changed) {
		l.sum[k] += latency.Seconds()
		l.n[k]++
	}
	l.mu.Unlock()
}

// Drop records that the engine turned away as saturated (429, 503), or
// let time out, a request that started at started.
func (l *Limiter) Drop(started time.Time) {
	l.mu.Lock()
	if !started.Before(l.changed) {
		l.drops++
	}
	l.mu.Unlock()
}

// Limit returns the current limit.
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit)
}

// Update folds the window since the last Update in and returns the new
// limit.
func (l *Limiter) Update(now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	before := l.limit
	defer func() {
		if l.limit != before {
			l.changed = now
		}
	}()
	if l.drops > 0 {
		l.limit = max(l.limit*l.cfg.Backoff, float64(l.cfg.Min))
		l.slowStart = false
		l.reset()
		return int(l.limit)
	}
	gradient, any := 1.0, false
	need := max(l.cfg.MinSamples, int(l.limit/4))
	for k := range kinds {
		if l.n[k] < need {
			continue
		}
		any = true
		mean := l.sum[k] / float64(l.n[k])
		l.base[k].add(mean, now, l.cfg.BaselineWindow)
		tol := l.cfg.Tolerance
		if k == PerToken {
			tol = l.cfg.TokenTolerance
		}
		if b := l.base[k].get(now, l.cfg.BaselineWindow); b > 0 {
			gradient = min(gradient, max(0.5, min(1, tol*b/mean)))
		}
	}
	if !any {
		return int(l.limit)
	}
	switch {
	case gradient < 1:
		l.limit *= gradient
		l.slowStart = false
	case float64(l.peak) < 0.9*l.limit:
		// The engine never had 90% of its limit: nothing learned about more.
	case l.slowStart:
		l.limit *= 1.5
	default:
		l.limit += math.Sqrt(l.limit)
	}
	l.limit = min(max(l.limit, float64(l.cfg.Min)), float64(l.cfg.Max))
	l.reset()
	return int(l.limit)
}

func (l *Limiter) reset() {
	l.sum, l.n, l.drops, l.peak = [kinds]float64{}, [kinds]int{}, 0, 0
}
