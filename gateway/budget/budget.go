// Package budget is the gateway's retry budget: retries may be at most a
// ratio of the requests seen over a sliding window, plus a small floor, so
// an outage cannot turn into a retry storm.
package budget

import (
	"sync"
	"time"
)

// Defaults of Config.
const (
	DefaultRatio   = 0.1
	DefaultFloor   = 10
	DefaultWindow  = 10 * time.Second
	defaultBuckets = 10
)

// Config tunes a Budget. Zero values take the defaults.
type Config struct {
	Ratio  float64       // retries per request allowed; default 0.1
	Floor  int           // retries always allowed per window; default 10
	Window time.Duration // sliding window; default 10s
}

// Budget counts requests and retries in a ring of buckets covering the
// window. Safe for concurrent use; the critical sections are a few
// additions.
type Budget struct {
	cfg    Config
	width  time.Duration
	mu     sync.Mutex
	epoch  []int64 // bucket epoch (time / width) each bucket holds
	reqs   []int64
	tries  []int64
	sumReq int64
	sumTry int64
}

// New returns a budget.
func New(cfg Config) *Budget {
	if !(cfg.Ratio > 0) {
		cfg.Ratio = DefaultRatio
	}
	if cfg.Floor < 0 {
		cfg.Floor = 0
	} else if cfg.Floor == 0 {
		cfg.Floor = DefaultFloor
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	return &Budget{
		cfg: cfg, width: cfg.Window / defaultBuckets,
		epoch: make([]int64, defaultBuckets), reqs: make([]int64, defaultBuckets), tries: make([]int64, defaultBuckets),
	}
}

// advance expires buckets older than the window; b.mu held.
func (b *Budget) bucket(now time.Time) int {
	e := now.UnixNano() / int64(b.width)
	i := int(e % defaultBuckets)
	if b.epoch[i] != e {
		b.sumReq -= b.reqs[i]
		b.sumTry -= b.tries[i]
		b.reqs[i], b.tries[i], b.epoch[i] = 0, 0, e
	}
	// Expire every other bucket that fell out of the window.
	for k := range b.epoch {
		if k != i && e-b.epoch[k] >= defaultBuckets && (b.reqs[k] != 0 || b.tries[k] != 0) {
			b.sumReq -= b.reqs[k]
			b.sumTry -= b.tries[k]
			b.reqs[k], b.tries[k] = 0, 0
		}
	}
	return i
}

// Request counts one incoming request.
func (b *Budget) Request(now time.Time) {
	b.mu.Lock()
	i := b.bucket(now)
	b.reqs[i]++
	b.sumReq++
	b.mu.Unlock()
}

// TryRetry reports whether one more retry fits the budget, and counts it
// when it does.
func (b *Budget) TryRetry(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.bucket(now)
	if float64(b.sumTry+1) > b.cfg.Ratio*float64(b.sumReq)+float64(b.cfg.Floor) {
		return false
	}
	b.tries[i]++
	b.sumTry++
	return true
}

// Window returns the requests and retries in the current window.
func (b *Budget) Window(now time.Time) (requests, retries int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bucket(now)
	return b.sumReq, b.sumTry
}
