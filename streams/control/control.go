// Package control is the optimizer's control loop: it consumes the
// processor's estimates from Kafka and, for every completed processor
// window, plans the routing with package optimizer/plan and publishes a
// weight snapshot whose version is the window's end (see
// docs/optimizer.md). The planning itself is optimizer/plan's; this
// package only does the I/O around it, through the Kafka client and the
// snapshot store its caller builds.
package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

// Store holds the published weight snapshots, one per cluster.
// *snapshots.Store implements it.
type Store interface {
	// Get returns the latest snapshot of cluster, or an error when there
	// is none (or it cannot be read).
	Get(ctx context.Context, cluster string) (*schemas.WeightSnapshot, error)
	// Publish stores snap as the latest snapshot of each of its clusters.
	Publish(ctx context.Context, snap *schemas.WeightSnapshot) error
}

// Config configures the loop.
type Config struct {
	// TopicPrefix names the topics (streams.TopicsFor). Default
	// "switchyard".
	TopicPrefix string
	// Replication of the topics the optimizer creates. Default: the
	// brokers' defaults.
	Replication streams.Replication
	// Settle is how long the estimates of a window may be quiet before the
	// window is planned without waiting for the next one (default 500ms).
	// The processor publishes a window's estimates in one burst.
	Settle time.Duration
	// Settings configure the planner.
	Settings plan.Settings
	// Registry, when set, is the engine registry: estimates of engines it
	// does not hold, or at another endpoint, are never planned, and a
	// registered engine is planned at its registered endpoint, region
	// and class. Default nil: any engine the estimates name.
	Registry *fleet.Registry
	// MaxGain bounds how much better than its baseline an engine's
	// estimate may look before it is quarantined (fleet.Guard). Default
	// 0: fleet.DefaultMaxGain with a registry, no bounds without one;
	// above 1: these bounds, with or without a registry; negative: no
	// plausibility bounds.
	MaxGain float64
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// Registerer receives the loop's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// TracerProvider makes a span per planned window (optimizer.round)
	// with its solve and publish as children; nil makes none.
	TracerProvider trace.TracerProvider
}

func (c *Config) defaults() {
	if c.Settle <= 0 {
		c.Settle = 500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// ClientOpts are the options the loop's Kafka client must be created
// with, next to the caller's own (seed brokers, TLS, SASL): consuming the
// estimates topic from its start, without a consumer group (every start
// reads the retained estimates again; windows already published are
// only applied to the planner, not re-planned).
func ClientOpts(cfg Config) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumeTopics(streams.TopicsFor(cfg.TopicPrefix).Estimates),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.ProducerBatchCompression(kgo.GzipCompression()), // settings and dead letters: read by every client without plugins (docs/topics.md)
	}
}

// Stats are the loop's counters.
type Stats struct {
	EstimatesConsumed  uint64
	SnapshotsPublished uint64
	LatestVersion      uint64
	DeadLettered       uint64
}

// Optimizer plans every window of estimates it consumes and publishes the
// snapshots.
type Optimizer struct {
	cfg    Config
	cl     *kgo.Client
	store  Store
	topics streams.Topics
	log    *slog.Logger
	m      *metrics
	tracer trace.Tracer

	estimates, published, latest, dead atomic.Uint64
	// guard filters every window's estimates (nil: none, see Config.MaxGain).
	guard *fleet.Guard
}

// New returns an optimizer that consumes and dead-letters through cl,
// which must be created with ClientOpts(cfg), and publishes to store. The
// caller closes cl after Run returns.
func New(cl *kgo.Client, store Store, cfg Config) (*Optimizer, error) {
	cfg.defaults()
	topics := streams.TopicsFor(cfg.TopicPrefix)
	if cl == nil {
		return nil, errors.New("optimizer: no kafka client")
	}
	if consumed, _ := cl.OptValue(kgo.ConsumeTopics).([]string); !slices.Contains(consumed, topics.Estimates) {
		return nil, fmt.Errorf("optimizer: kafka client does not consume %s (see ClientOpts)", topics.Estimates)
	}
	if store == nil {
		return nil, errors.New("optimizer: no snapshot store")
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("optimizer: %w", err)
	}
	o := &Optimizer{cfg: cfg, cl: cl, store: store, topics: topics, log: cfg.Logger, m: m, tracer: cfg.tracer()}
	if o.guard, err = fleet.GuardFor(cfg.Registry, cfg.MaxGain); err != nil {
		return nil, fmt.Errorf("optimizer: %w", err)
	}
	return o, nil
}

// Stats returns the counters.
func (o *Optimizer) Stats() Stats {
	return Stats{
		EstimatesConsumed:  o.estimates.Load(),
		SnapshotsPublished: o.published.Load(),
		LatestVersion:      o.latest.Load(),
		DeadLettered:       o.dead.Load(),
	}
}

// Run consumes estimates and publishes a snapshot per completed window
// until ctx is done, then returns nil. Run may be called once.
func (o *Optimizer) Run(ctx context.Context) error {
	if err := streams.EnsureTopics(ctx, o.cl, o.topics, 0, o.cfg.Replication); err != nil {
		o.log.Warn("creating topics", "err", err)
	}
	o.recordSettings(ctx)
	planner := o.resume(ctx)
	dlq := streams.NewDeadLetter(o.cl, o.topics.DeadLetter)

	records := make(chan *schemas.Estimate, 1024)
	consumeDone := make(chan struct{})
	go func() {
		defer close(consumeDone)
		defer close(records)
		o.consume(ctx, dlq, records)
	}()
	defer func() { <-consumeDone }()
	o.loop(ctx, planner, records)
	return nil
}

// resume returns a planner that continues from what is published: the
// previous weights for the churn term, and no re-planning of windows
// already published.
func (o *Optimizer) resume(ctx context.Context) *plan.Planner {
	planner := plan.NewPlanner(o.cfg.Settings)
	for _, c := range o.cfg.Settings.Clusters {
		if snap, err := o.store.Get(ctx, c); err == nil {
			planner.Remember(snap)
			if snap.GetVersion() > o.latest.Load() {
				o.latest.Store(snap.GetVersion())
			}
		}
	}
	return planner
}

// loop groups the estimates by window and plans each window: estimates
// arrive window by window, so a window is planned when the next one
// starts arriving or when its estimates have been quiet for Settle.
func (o *Optimizer) loop(ctx context.Context, planner *plan.Planner, records <-chan *schemas.Estimate) {
	var pending []*schemas.Estimate
	var pendingEnd int64
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	flush := func() {
		if pendingEnd != 0 {
			o.round(ctx, planner, time.UnixMilli(pendingEnd), pending)
		}
		pending, pendingEnd = nil, 0
	}
	for {
		select {
		case <-ctx.Done():
			return
		case est, ok := <-records:
			if !ok {
				return
			}
			end := est.WindowEndUnixMs()
			if pendingEnd != 0 && end > pendingEnd {
				flush()
			}
			pending = append(pending, est)
			pendingEnd = max(pendingEnd, end)
			settle.Reset(o.cfg.Settle)
		case <-settle.C:
			flush()
		}
	}
}

// round plans and publishes the window ending at end.
func (o *Optimizer) round(ctx context.Context, planner *plan.Planner, end time.Time, ests []*schemas.Estimate) {
	ests = o.screen(ests)
	if uint64(end.UnixMilli()) <= o.latest.Load() {
		planner.Apply(ests...) // already published (e.g. before a restart)
		return
	}
	ctx, span := o.startSpan(ctx, "optimizer.round", attribute.Int64("switchyard.window_end_unix_ms", end.UnixMilli()), attribute.Int("switchyard.estimates", len(ests)))
	var err error
	defer func() { endSpan(span, err) }()
	start := time.Now()
	_, solveSpan := o.startSpan(ctx, "optimizer.solve")
	snap, err := planner.Plan(end, ests)
	endSpan(solveSpan, err)
	o.m.solveSecs.Observe(time.Since(start).Seconds())
	switch {
	case errors.Is(err, plan.ErrNothingToPlan), errors.Is(err, plan.ErrOldWindow):
		o.m.failures.WithLabelValues("instance").Inc()
		o.log.Debug("not planning", "window_end", end, "err", err)
		span.SetAttributes(attribute.String("switchyard.skipped", err.Error()))
		err = nil // nothing to plan is no failure of the round
		return
	case err != nil:
		o.m.failures.WithLabelValues("solve").Inc()
		o.log.Error("planning failed", "window_end", end, "err", err)
		return
	}
	span.SetAttributes(attribute.Int64("switchyard.snapshot_version", int64(snap.GetVersion())), attribute.Int("switchyard.clusters", len(snap.GetClusters())))
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pctx, pubSpan := o.startSpan(pctx, "optimizer.publish")
	err = o.store.Publish(pctx, snap)
	endSpan(pubSpan, err)
	if err != nil {
		o.m.failures.WithLabelValues("publish").Inc()
		o.log.Warn("publishing snapshot", "version", snap.GetVersion(), "err", err)
		return
	}
	o.latest.Store(snap.GetVersion())
	o.published.Add(1)
	o.m.published.Inc()
	o.m.version.Set(float64(snap.GetVersion()))
	o.m.objective.Set(snap.GetStats().GetObjectiveMs() / 1000) // seconds
	o.m.shedRPS.Set(snap.GetStats().GetTotalShedRps())
	o.m.plan(snap)
	o.log.Info("snapshot published", "version", snap.GetVersion(), "objective_ms", snap.GetStats().GetObjectiveMs(), "clusters", len(snap.GetClusters()))
}
