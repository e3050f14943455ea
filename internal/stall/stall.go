// Package stall measures how long a process was kept from running: a
// probe goroutine asks to wake every period and records how late it woke.
// A late wake-up is time in which no goroutine of the process that was
// due ran either (the machine's other work had the CPUs, or the runtime
// stopped the world), so a latency measured across it grew by as much.
// `switchyard demo` reports it, and bench/twin/run.sh uses it to tell a
// live run measured on a busy machine from one that measured the fleet
// (docs/sim.md, "Digital twin").
package stall

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/metrics"
	"slices"
	"sync"
	"time"
)

// Clock is the probe's time: Now, and Sleep, which returns after at
// least d (it may return later: that lateness is what the probe
// measures) or with ctx's error when ctx is done first.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Opt configures a Probe.
type Opt interface{ apply(*cfg) }

type cfg struct {
	period, threshold time.Duration
	clock             Clock
	worst             int
}

type optFunc func(*cfg)

func (f optFunc) apply(c *cfg) { f(c) }

// Period is how often the probe asks to wake (default 10 ms).
func Period(d time.Duration) Opt { return optFunc(func(c *cfg) { c.period = d }) }

// Threshold is the lateness from which a wake-up counts as a stall
// (default 50 ms).
func Threshold(d time.Duration) Opt { return optFunc(func(c *cfg) { c.threshold = d }) }

// WithClock replaces the wall clock (tests).
func WithClock(c Clock) Opt { return optFunc(func(cf *cfg) { cf.clock = c }) }

// Worst is how many of the longest stalls Stats lists (default 5).
func Worst(n int) Opt { return optFunc(func(c *cfg) { c.worst = n }) }

func (c *cfg) validate() error {
	switch {
	case c.period <= 0:
		return fmt.Errorf("stall: period %v is not positive", c.period)
	case c.threshold <= 0:
		return fmt.Errorf("stall: threshold %v is not positive", c.threshold)
	case c.clock == nil:
		return errors.New("stall: nil clock")
	case c.worst < 0 || c.worst > 1000:
		return fmt.Errorf("stall: worst %d not in [0, 1000]", c.worst)
	}
	return nil
}

// Event is one stall.
type Event struct {
	// AtUnixMs is when the probe should have woken.
	AtUnixMs int64 `json:"at_unix_ms"`
	// Ms is how late it woke.
	Ms float64 `json:"ms"`
}

// Stats is what a probe has seen.
type Stats struct {
	// PeriodMs and ThresholdMs are the probe's settings.
	PeriodMs    float64 `json:"period_ms"`
	ThresholdMs float64 `json:"threshold_ms"`
	// Wakeups is how many times the probe woke.
	Wakeups int64 `json:"wakeups"`
	// MaxMs is the latest wake-up's lateness.
	MaxMs float64 `json:"max_ms"`
	// Stalls counts wake-ups late by Threshold or more, and StalledMs
	// adds up their lateness.
	Stalls    int64   `json:"stalls"`
	StalledMs float64 `json:"stalled_ms"`
	// Worst are the longest stalls, longest first.
	Worst []Event `json:"worst,omitempty"`
	// GCPauseMaxMs bounds the longest stop-the-world pause of the Go
	// runtime in the process so far (the upper edge of the runtime's
	// histogram bucket; 0 when none is known): a stall much longer is
	// not the collector's.
	GCPauseMaxMs float64 `json:"gc_pause_max_ms"`
}

// Probe measures stalls while Run runs.
type Probe struct {
	cfg cfg

	mu    sync.Mutex
	stats Stats
}

// New returns a probe; it measures nothing until Run.
func New(opts ...Opt) (*Probe, error) {
	c := cfg{period: 10 * time.Millisecond, threshold: 50 * time.Millisecond, clock: realClock{}, worst: 5}
	for _, o := range opts {
		o.apply(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Probe{cfg: c, stats: Stats{PeriodMs: ms(c.period), ThresholdMs: ms(c.threshold)}}, nil
}

// Run probes until ctx is done; it returns nil then.
func (p *Probe) Run(ctx context.Context) error {
	for {
		due := p.cfg.clock.Now().Add(p.cfg.period)
		if err := p.cfg.clock.Sleep(ctx, p.cfg.period); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("stall: sleeping: %w", err)
		}
		p.observe(due, p.cfg.clock.Now().Sub(due))
	}
}

func (p *Probe) observe(due time.Time, late time.Duration) {
	late = max(late, 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	s := &p.stats
	s.Wakeups++
	s.MaxMs = max(s.MaxMs, ms(late))
	if late < p.cfg.threshold {
		return
	}
	s.Stalls++
	s.StalledMs += ms(late)
	if p.cfg.worst == 0 {
		return
	}
	ev := Event{AtUnixMs: due.UnixMilli(), Ms: ms(late)}
	i, _ := slices.BinarySearchFunc(s.Worst, ev, func(a, b Event) int {
		switch {
		case a.Ms > b.Ms:
			return -1
		case a.Ms < b.Ms:
			return 1
		}
		return 0
	})
	if i < p.cfg.worst {
		s.Worst = slices.Insert(s.Worst, i, ev)
		s.Worst = s.Worst[:min(len(s.Worst), p.cfg.worst)]
	}
}

// Stats returns what the probe has seen so far.
func (p *Probe) Stats() Stats {
	p.mu.Lock()
	s := p.stats
	s.Worst = slices.Clone(p.stats.Worst)
	p.mu.Unlock()
	s.MaxMs, s.StalledMs = round(s.MaxMs), round(s.StalledMs)
	for i := range s.Worst {
		s.Worst[i].Ms = round(s.Worst[i].Ms)
	}
	s.GCPauseMaxMs = round(GCPauseMax().Seconds() * 1000)
	return s
}

// gcPauses is the runtime metric of stop-the-world pauses for the
// collector.
const gcPauses = "/sched/pauses/total/gc:seconds"

// GCPauseMax bounds the longest garbage-collection pause of the process
// so far: the upper edge of the highest non-empty bucket of the runtime's
// pause histogram (0 when the runtime reports none).
func GCPauseMax() time.Duration {
	s := []metrics.Sample{{Name: gcPauses}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := s[0].Value.Float64Histogram()
	for i := len(h.Counts) - 1; i >= 0; i-- {
		if h.Counts[i] == 0 {
			continue
		}
		edge := h.Buckets[i+1]
		if math.IsInf(edge, 1) {
			edge = h.Buckets[i]
		}
		if math.IsInf(edge, 0) || math.IsNaN(edge) {
			return 0
		}
		return time.Duration(edge * float64(time.Second))
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(v float64) float64 { return math.Round(v*10) / 10 }
