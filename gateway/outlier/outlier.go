// Package outlier is the gateway's passive guardrail: consecutive errors
// (failed connections, 5xx, broken streams) eject an engine with
// exponential back-off (never more than a set share of the cluster at
// once), and errors, timeouts and latency spikes add a penalty that
// scales the engine's weight down and decays as it recovers. A timeout
// never ejects: an engine too busy to answer in time is serving, and
// ejecting it would move its load onto the others (admission control, in
// the gateway, keeps engines from getting that busy).
package outlier

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/pick"
)

// Config tunes a Detector. Zero values take the defaults.
type Config struct {
	// Consecutive failures that eject an engine. Default 5.
	Consecutive int
	// BaseEjection is the first ejection's length; each further ejection
	// doubles it. Default 5s.
	BaseEjection time.Duration
	// MaxEjection caps an ejection's length; an engine not ejected for
	// this long starts again at BaseEjection. Default 2m.
	MaxEjection time.Duration
	// MaxEjectedShare caps the share of the cluster's engines ejected at
	// once. Default 0.5.
	MaxEjectedShare float64
	// ErrorPenalty is added to the penalty per failure. Default 1.
	ErrorPenalty float64
	// SlowPenalty is added per response slower than SlowFactor times the
	// engine's moving average TTFT. Defaults 0.5 and 4.
	SlowPenalty float64
	SlowFactor  float64
	// HalfLife of penalties. Default 10s.
	HalfLife time.Duration
}

func (c *Config) defaults() {
	if c.Consecutive <= 0 {
		c.Consecutive = 5
	}
	if c.BaseEjection <= 0 {
		c.BaseEjection = 5 * time.Second
	}
	if c.MaxEjection <= 0 {
		c.MaxEjection = 2 * time.Minute
	}
	if !(c.MaxEjectedShare > 0) || c.MaxEjectedShare > 1 {
		c.MaxEjectedShare = 0.5
	}
	if !(c.ErrorPenalty > 0) || math.IsInf(c.ErrorPenalty, 0) {
		c.ErrorPenalty = 1
	}
	if !(c.SlowPenalty > 0) || math.IsInf(c.SlowPenalty, 0) {
		c.SlowPenalty = 0.5
	}
	if !(c.SlowFactor > 1) || math.IsInf(c.SlowFactor, 0) {
		c.SlowFactor = 4
	}
	if c.HalfLife <= 0 {
		c.HalfLife = 10 * time.Second
	}
}

// Detector tracks outcomes per engine. Safe for concurrent use: a success
// touches only its engine's record.
type Detector struct {
	cfg     Config
	recs    sync.Map // *pick.State -> *record
	mu      sync.Mutex
	size    int // engines in the cluster
	ejected int
	last    time.Time // last Tick
}

type record struct {
	st          *pick.State
	consecutive atomic.Int32
	mu          sync.Mutex
	penalty     float64
	ewma        float64 // TTFT seconds
	backoff     int     // ejections in a row
	ejected     bool
	until       time.Time
	lastEject   time.Time
}

// New returns a detector.
func New(cfg Config) *Detector {
	cfg.defaults()
	return &Detector{cfg: cfg}
}

// SetClusterSize sets the number of engines the ejected share refers to.
func (d *Detector) SetClusterSize(n int) {
	d.mu.Lock()
	d.size = n
	d.mu.Unlock()
}

func (d *Detector) rec(st *pick.State) *record {
	if r, ok := d.recs.Load(st); ok {
		return r.(*record)
	}
	r, _ := d.recs.LoadOrStore(st, &record{st: st})
	return r.(*record)
}

// Success records a good response with its time to first token (0 if
// unknown). It reports whether it counted as a latency spike.
func (d *Detector) Success(st *pick.State, ttft time.Duration) (slow bool) {
	r := d.rec(st)
	r.consecutive.Store(0)
	if ttft <= 0 {
		return false
	}
	s := ttft.Seconds()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ewma > 0 && s > d.cfg.SlowFactor*r.ewma {
		r.penalty += d.cfg.SlowPenalty
		r.apply()
		slow = true
	}
	if r.ewma == 0 {
		r.ewma = s
	} else {
		r.ewma = 0.9*r.ewma + 0.1*s
	}
	return slow
}

// Failure records an error at now (a timeout is Timeout). It reports whether the
// engine was ejected by it.
func (d *Detector) Failure(st *pick.State, now time.Time) (ejected bool) {
	r := d.rec(st)
	n := r.consecutive.Add(1)
	r.mu.Lock()
	r.penalty += d.cfg.ErrorPenalty
	r.apply()
	already := r.ejected
	r.mu.Unlock()
	if already || int(n) < d.cfg.Consecutive {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if float64(d.ejected+1) > d.cfg.MaxEjectedShare*float64(d.size) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ejected {
		return false
	}
	if now.Sub(r.lastEject) > d.cfg.MaxEjection {
		r.backoff = 0
	}
	dur := d.cfg.BaseEjection << min(r.backoff, 20)
	if dur > d.cfg.MaxEjection || dur <= 0 {
		dur = d.cfg.MaxEjection
	}
	r.backoff++
	r.ejected, r.until, r.lastEject = true, now.Add(dur), now
	r.consecutive.Store(0)
	d.ejected++
	st.SetEjected(true)
	return true
}

// Saturated records that the engine turned a request away as saturated
// (HTTP 429 or 503): it adds ErrorPenalty to the penalty, so the engine
// gets a smaller share of keys until it decays, but does not count
// towards ejection (a saturated engine is serving, and the penalty
// already moves load off it).
func (d *Detector) Saturated(st *pick.State) {
	r := d.rec(st)
	r.mu.Lock()
	r.penalty += d.cfg.ErrorPenalty
	r.apply()
	r.mu.Unlock()
}

// Timeout records that a request to the engine timed out (first token or
// idle): like Saturated, a penalty that does not count towards ejection,
// and it does not reset the count of consecutive failures either.
func (d *Detector) Timeout(st *pick.State) { d.Saturated(st) }

// Restarted forgets what st's failures taught: an engine that health
// checks or its own signals had marked down and that answers again has
// restarted (as Envoy's successful_active_health_check_uneject_host). Its
// ejection ends now, its back-off starts again at BaseEjection and its
// penalty and latency average are cleared: while it was down every
// request that reached it failed, and an ejection doubled by each of
// those would keep the engine out for minutes after it came back.
func (d *Detector) Restarted(st *pick.State) {
	r := d.rec(st)
	d.mu.Lock()
	defer d.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ejected {
		r.ejected = false
		st.SetEjected(false)
		d.ejected--
	}
	r.backoff, r.penalty, r.ewma, r.lastEject = 0, 0, 0, time.Time{}
	r.consecutive.Store(0)
	r.apply()
}

// apply stores the penalty in the state; r.mu held.
func (r *record) apply() {
	r.st.SetPenalty(1 - 1/(1+r.penalty))
}

// Tick returns engines whose ejection ended and decays penalties. Call it
// a few times a second; it returns the number of engines returned.
func (d *Detector) Tick(now time.Time) (returned int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	decay := 1.0
	if !d.last.IsZero() && now.After(d.last) {
		decay = math.Exp2(-now.Sub(d.last).Seconds() / d.cfg.HalfLife.Seconds())
	}
	d.last = now
	d.recs.Range(func(_, v any) bool {
		r := v.(*record)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.ejected && !now.Before(r.until) {
			r.ejected = false
			r.consecutive.Store(0)
			r.st.SetEjected(false)
			d.ejected--
			returned++
		}
		if r.penalty > 0 {
			r.penalty *= decay
			if r.penalty < 0.01 {
				r.penalty = 0
			}
			r.apply()
		}
		return true
	})
	return returned
}

// Ejected returns the number of engines ejected now.
func (d *Detector) Ejected() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ejected
}
