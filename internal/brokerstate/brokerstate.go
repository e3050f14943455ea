// Package brokerstate tells whether a service's brokers (Kafka, NATS) are
// reachable, and makes an outage visible: one WARN when a broker is lost
// (then one every WarnEvery while it stays down, with how long), one INFO
// when it is back, the gauge switchyard_broker_connected{broker} and the
// counter switchyard_broker_outages_total{broker}, and a readiness detail
// (Health) that obs.ServeMetrics serves at /ready and in /health.
//
// Each service makes one Tracker and runs Watch for each broker it uses
// with the check of its client (PingKafka, NATSConnected).
package brokerstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The brokers a Tracker knows; the values of the broker label.
const (
	Kafka = "kafka"
	NATS  = "nats"
)

// Default intervals.
const (
	DefaultCheckEvery = 2 * time.Second
	DefaultWarnEvery  = 30 * time.Second
	checkTimeout      = 5 * time.Second
)

// Opt configures a Tracker.
type Opt interface{ apply(*cfg) }

type cfg struct {
	checkEvery, warnEvery time.Duration
	now                   func() time.Time
}

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

// CheckEvery is how often Watch checks a broker. Default DefaultCheckEvery.
func CheckEvery(d time.Duration) Opt { return opt(func(c *cfg) { c.checkEvery = d }) }

// WarnEvery is how often the WARN is repeated while a broker stays down.
// Default DefaultWarnEvery.
func WarnEvery(d time.Duration) Opt { return opt(func(c *cfg) { c.warnEvery = d }) }

// Clock sets the clock of the outage durations. Default time.Now.
func Clock(now func() time.Time) Opt { return opt(func(c *cfg) { c.now = now }) }

func (c cfg) validate() error {
	if c.checkEvery <= 0 || c.warnEvery <= 0 {
		return fmt.Errorf("brokerstate: check and warn intervals must be positive (check %v, warn %v)", c.checkEvery, c.warnEvery)
	}
	return nil
}

// Tracker holds the state of a service's brokers. It is safe for
// concurrent use.
type Tracker struct {
	cfg       cfg
	log       *slog.Logger
	connected *prometheus.GaugeVec
	outages   *prometheus.CounterVec

	mu    sync.Mutex
	state map[string]*state
}

type state struct {
	checked  bool // at least one check done
	up       bool
	since    time.Time // of the last change (or of the first check)
	lastWarn time.Time
	err      error
}

// New returns a Tracker logging to log and registering its metrics with
// reg, both labels initialised (a broker not watched stays 0 connected).
func New(log *slog.Logger, reg prometheus.Registerer, opts ...Opt) (*Tracker, error) {
	c := cfg{checkEvery: DefaultCheckEvery, warnEvery: DefaultWarnEvery, now: time.Now}
	for _, o := range opts {
		o.apply(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	t := &Tracker{cfg: c, log: log, state: map[string]*state{},
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_broker_connected",
			Help: "1 while the service reaches the broker (Kafka: a broker answers ApiVersions; NATS: the connection is up), 0 otherwise"}, []string{"broker"}),
		outages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_broker_outages_total",
			Help: "times the service lost the broker (connected went from 1, or from the start, to 0)"}, []string{"broker"}),
	}
	for _, c := range []prometheus.Collector{t.connected, t.outages} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering broker metrics: %w", err)
		}
	}
	for _, b := range []string{Kafka, NATS} {
		t.connected.WithLabelValues(b)
		t.outages.WithLabelValues(b)
	}
	return t, nil
}

// Set records the result of one check of broker: err nil means reachable.
// It logs and counts the transitions, and repeats the WARN every
// WarnEvery while the broker stays down.
func (t *Tracker) Set(broker string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.cfg.now()
	s := t.state[broker]
	if s == nil {
		s = &state{}
		t.state[broker] = s
	}
	up := err == nil
	switch {
	case !s.checked || s.up != up:
		wasChecked, downSince := s.checked, s.since
		s.checked, s.up, s.since, s.err = true, up, now, err
		if up {
			t.connected.WithLabelValues(broker).Set(1)
			if wasChecked {
				t.log.Info("broker available again", "broker", broker, "down_for", now.Sub(downSince).Round(time.Millisecond))
			} else {
				t.log.Info("broker connected", "broker", broker)
			}
			return
		}
		t.connected.WithLabelValues(broker).Set(0)
		t.outages.WithLabelValues(broker).Inc()
		s.lastWarn = now
		t.log.Warn("broker unavailable", "broker", broker, "err", err)
	case !up:
		s.err = err
		if now.Sub(s.lastWarn) >= t.cfg.warnEvery {
			s.lastWarn = now
			t.log.Warn("broker still unavailable", "broker", broker, "down_for", now.Sub(s.since).Round(time.Second), "err", err)
		}
	}
}

// Watch checks broker with check every CheckEvery (the first at once)
// and records each result, until ctx is done.
func (t *Tracker) Watch(ctx context.Context, broker string, check func(context.Context) error) {
	tick := time.NewTicker(t.cfg.checkEvery)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		err := check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		t.Set(broker, err)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// WaitUp checks broker every CheckEvery until a check succeeds, recording
// each result (so a broker down at start is logged as any outage is); it
// returns ctx's error when ctx ends first. Services call it before a
// first step that would fail without the broker (creating topics).
func (t *Tracker) WaitUp(ctx context.Context, broker string, check func(context.Context) error) error {
	tick := time.NewTicker(t.cfg.checkEvery)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, checkTimeout)
		err := check(cctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t.Set(broker, err)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Go runs Watch in a goroutine; stop ends it and waits for it.
func (t *Tracker) Go(ctx context.Context, broker string, check func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); t.Watch(ctx, broker, check) }()
	return func() { cancel(); <-done }
}

// PingKafka is the check of a Kafka client: some broker answers.
func PingKafka(cl *kgo.Client) func(context.Context) error {
	return func(ctx context.Context) error { return cl.Ping(ctx) }
}

// ErrNATSDisconnected is the error of NATSConnected while the connection
// is not up.
var ErrNATSDisconnected = errors.New("nats not connected")

// NATSConnected is the check of a NATS connection: it is connected.
func NATSConnected(nc *nats.Conn) func(context.Context) error {
	return func(context.Context) error {
		if nc.IsConnected() {
			return nil
		}
		if err := nc.LastError(); err != nil {
			return fmt.Errorf("%w (%s): %w", ErrNATSDisconnected, nc.Status(), err)
		}
		return fmt.Errorf("%w (%s)", ErrNATSDisconnected, nc.Status())
	}
}

// Health reports whether every broker checked so far is reachable, and
// one line per broker: "kafka: connected" or "nats: unavailable for 12s:
// ERR" ("not checked yet" before the first check).
func (t *Tracker) Health() (ready bool, detail string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.cfg.now()
	names := make([]string, 0, len(t.state))
	for b := range t.state {
		names = append(names, b)
	}
	sort.Strings(names)
	ready = true
	var out strings.Builder
	for _, b := range names {
		s := t.state[b]
		switch {
		case !s.checked:
			ready = false
			fmt.Fprintf(&out, "%s: not checked yet\n", b)
		case s.up:
			fmt.Fprintf(&out, "%s: connected\n", b)
		default:
			ready = false
			fmt.Fprintf(&out, "%s: unavailable for %s: %v\n", b, now.Sub(s.since).Round(time.Second), s.err)
		}
	}
	return ready, out.String()
}
