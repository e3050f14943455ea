// Package process is the stream processor: it consumes engine signals and
// routing events in a consumer group, windows them by event time and
// publishes per-engine, per-cluster and per-(cluster, engine) estimates to
// the estimates topic (see docs/processor.md). One Processor (New, Run)
// is either the only active member of its consumer group or, with
// Config.Partitioned, one of several instances sharing the input
// partitions, whose partition states RunCombiner turns into the same
// estimates. Core is the same processing without Kafka (records in,
// estimates out), which replay drives offline, and the engine of both
// modes: the single processor runs one Core over every input partition, a
// partitioned instance one per partition it owns.
//
// Delivery: estimates are idempotent outputs keyed by entity, each a
// deterministic function of (entity, window, input records). Offsets and
// the window clock are checkpointed to PREFIX.processor.checkpoints only
// after every estimate and dead-letter record they cover is acknowledged
// by Kafka; the group's committed offsets follow. A restart resumes from
// the lowest offset any open window needs, rebuilds those windows, and
// publishes exactly the estimates an uninterrupted run would have (a
// window published just before a crash may be published again,
// byte-identical).
package process

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
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// Config configures the processor.
type Config struct {
	// TopicPrefix names the topics (streams.TopicsFor). Default "switchyard".
	TopicPrefix string
	// Partitioned makes the processor one of several instances in its
	// consumer group that share the input partitions (cooperative-sticky
	// balancer): it publishes each owned partition's state to
	// PartialsTopic and a checkpoint per partition, and a RunCombiner
	// process publishes the estimates, the same ones a single processor
	// would (docs/processor.md#several-instances). Default false: the
	// processor is the only active member of its group (another is a hot
	// standby), tracks every input partition and publishes the estimates
	// itself. The group's members must all run in the same mode.
	Partitioned bool
	// Replication of the topics the processor creates. Default: the
	// brokers' defaults.
	Replication streams.Replication
	// Group is the consumer group and the checkpoint key. Default
	// "switchyard-processor".
	Group string
	// Window is the window size. Default 30s.
	Window time.Duration
	// Slide is the distance between window starts; Window must be a
	// multiple of it. Default 10s.
	Slide time.Duration
	// AllowedLateness is how far out of event-time order a record may
	// arrive and still count. Default 5s.
	AllowedLateness time.Duration
	// Partitions is the partition count used when creating missing topics.
	// Default 3.
	Partitions int32
	// MaxClockSkew is how far ahead of the processor's clock a record's
	// event time may be: a record dated later is dead-lettered (reason
	// future_event_time) and never moves the watermark. Default
	// DefaultMaxClockSkew (1 minute); negative: no limit.
	MaxClockSkew time.Duration
	// SessionTimeout is the consumer group session timeout: how long a
	// processor that died without leaving the group (one stopped
	// normally leaves it) holds its partitions. Default
	// DefaultSessionTimeout (10s).
	SessionTimeout time.Duration
	// InstanceID, when set, makes the processor a static group member
	// (KIP-345): a processor restarted with the same id after a kill
	// takes its partitions back at once instead of after SessionTimeout.
	// A static member does not leave the group when stopped, so a
	// standby with another id waits SessionTimeout. Default "": dynamic
	// membership.
	InstanceID string
	// Registry, when set, is the engine registry: signals for engines it
	// does not hold, or at another endpoint, are dead-lettered (reason
	// unregistered_engine or endpoint_mismatch), counted and logged at
	// WARN (docs/security.md#engine-registry). Default nil: every
	// engine's signals are taken.
	Registry *fleet.Registry
	// Fitter fits latency profiles. Default estimate.ConvexFit.
	Fitter estimate.Fitter
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the processor's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// TracerProvider makes the processor.fire and processor.publish spans
	// of every poll that completes windows; nil makes none.
	TracerProvider trace.TracerProvider
}

func (c *Config) defaults() {
	if c.Group == "" {
		c.Group = "switchyard-processor"
	}
	if c.Window == 0 {
		c.Window = 30 * time.Second
	}
	if c.Slide == 0 {
		c.Slide = 10 * time.Second
		if c.Window%c.Slide != 0 || c.Slide > c.Window {
			c.Slide = c.Window
		}
	}
	if c.AllowedLateness == 0 {
		c.AllowedLateness = 5 * time.Second
	}
	if c.Partitions <= 0 {
		c.Partitions = 3
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = DefaultMaxClockSkew
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a configuration error; empty fields take their
// defaults first.
func (c Config) Validate() error {
	c.defaults()
	return c.Spec().Validate()
}

// Spec is the window spec of c.
func (c Config) Spec() window.Spec {
	return window.Spec{Size: c.Window, Slide: c.Slide, AllowedLateness: c.AllowedLateness}
}

// CheckpointTopic is the compacted topic the processor keeps its
// checkpoints in, keyed by group.
func CheckpointTopic(prefix string) string {
	if prefix == "" {
		prefix = streams.DefaultPrefix
	}
	return prefix + ".processor.checkpoints"
}

// clientOpts are the options of both modes' Kafka client: the consumer
// group cfg.Group on the input topics (signals, routing events and arrival
// records, streams.Topics.Inputs), reading from the
// start, without auto-commit (the processor commits after each
// checkpoint); producing with acknowledgement from all in-sync replicas
// and no linger; up to 8 MiB per partition per fetch (the default is 1
// MiB), so catching up on a backlog takes fewer round trips; the
// session timeout cfg.SessionTimeout with a heartbeat every tenth of it;
// static membership with cfg.InstanceID.
func clientOpts(cfg Config) []kgo.Opt {
	cfg.defaults()
	topics := streams.TopicsFor(cfg.TopicPrefix)
	opts := []kgo.Opt{
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(topics.Inputs()...),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.GzipCompression()), // read by every client without plugins (docs/topics.md)
		kgo.FetchMaxPartitionBytes(8 << 20),
		kgo.DisableClientMetrics(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(max(cfg.SessionTimeout/10, 100*time.Millisecond)),
	}
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	return opts
}

// checkClient reports a client that was not created with p.ClientOpts().
func (p *Processor) checkClient(cl *kgo.Client) error {
	group, topics := p.cfg.Group, p.topics
	if cl == nil {
		return errors.New("no kafka client")
	}
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g != group {
		return fmt.Errorf("kafka client consumes in group %q, want %q (see ClientOpts)", g, group)
	}
	if off, _ := cl.OptValue(kgo.DisableAutoCommit).(bool); !off {
		return errors.New("kafka client commits offsets automatically; the processor commits after each checkpoint (see ClientOpts)")
	}
	consumed, _ := cl.OptValue(kgo.ConsumeTopics).([]string)
	for _, t := range topics.Inputs() {
		if !slices.Contains(consumed, t) {
			return fmt.Errorf("kafka client does not consume %s (see ClientOpts)", t)
		}
	}
	if blocks, _ := cl.OptValue(kgo.BlockRebalanceOnPoll).(bool); p.inst != nil && !blocks {
		return errors.New("kafka client lets rebalances run while a poll is handled; a partitioned processor holds them (see ClientOpts)")
	}
	return nil
}

// Stats counts what the processor has done since it started. A
// partitioned processor counts the records it handles (SignalsConsumed,
// RoutingEventsConsumed, DeadLettered, Late); the estimates, windows and
// checkpoints are the combiner's, and its counters stay zero.
type Stats struct {
	SignalsConsumed       uint64
	RoutingEventsConsumed uint64
	EstimatesPublished    uint64
	DeadLettered          uint64
	Late                  uint64
	WindowsFired          uint64
	Checkpoints           uint64
	// LastWindowEnd is the end of the latest window whose estimates are
	// checkpointed (zero before the first).
	LastWindowEnd time.Time
}

// Processor consumes, windows and publishes through one Kafka client, as
// the only active member of its group or, with Config.Partitioned, as one
// of several instances (see Config.Partitioned).
type Processor struct {
	cfg    Config
	topics streams.Topics
	log    *slog.Logger
	tracer trace.Tracer
	counters

	// inst runs the partitioned mode; nil in the single mode.
	inst *instance

	// The single mode's.
	m  *metrics
	cl *kgo.Client // set by Run

	// Test hooks.
	// beforeCheckpoint runs after outputs are flushed and before the
	// checkpoint is written; an error stops Run (a crash).
	beforeCheckpoint func() error
	// noFinalCheckpoint makes Run return on cancel without flushing or
	// checkpointing (a kill).
	noFinalCheckpoint bool
	// onCheckpoint runs after each checkpoint.
	onCheckpoint func()
	// onHandled runs on the loop after each poll that delivered records,
	// once they are handled (before windows fire).
	onHandled func(records int)
	// maxPoll bounds the records handled per loop iteration (default 10000).
	maxPoll int
}

// counters are the Stats counters.
type counters struct {
	signals, routing, published, dead, lateN, fired, ckpts atomic.Uint64
	lastEnd                                                atomic.Int64
}

// count counts one handled record with outcome out: a signal if
// signals, else a routing event or arrival record.
func (c *counters) count(signals bool, out Outcome) {
	switch out {
	case Accepted:
		if signals {
			c.signals.Add(1)
		} else {
			c.routing.Add(1)
		}
	case Late:
		c.lateN.Add(1)
	case DeadLettered:
		c.dead.Add(1)
	}
}

// New validates cfg and returns a processor for it, and registers its
// metrics with cfg.Registerer (the single mode's or the partitioned
// mode's, docs/metrics.md). Its Kafka client is created with
// p.ClientOpts() and handed to Run.
func New(cfg Config) (*Processor, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("processor config: %w", err)
	}
	p := &Processor{cfg: cfg, topics: streams.TopicsFor(cfg.TopicPrefix), log: cfg.Logger, tracer: cfg.tracer(), maxPoll: 10000}
	if cfg.Partitioned {
		in, err := newInstance(cfg, &p.counters)
		if err != nil {
			return nil, err
		}
		p.inst = in
		return p, nil
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	p.m = m
	return p, nil
}

// ClientOpts are the options the processor's Kafka client must be created
// with, next to the caller's own (seed brokers, TLS, SASL): the consumer
// group Config.Group on the input topics (signals, routing events and
// arrival records, streams.Topics.Inputs), reading from the start,
// without auto-commit (the processor commits after each checkpoint);
// producing with acknowledgement from all in-sync replicas and no
// linger; up to 8 MiB per partition per fetch (the default is 1 MiB), so
// catching up on a backlog takes fewer round trips; the session timeout
// Config.SessionTimeout with a heartbeat every tenth of it; static
// membership with Config.InstanceID. A partitioned processor's add the
// cooperative-sticky balancer, rebalances held while a poll is handled,
// its assignment callbacks and the hooks that count its metrics.
func (p *Processor) ClientOpts() []kgo.Opt {
	if p.inst != nil {
		return p.inst.clientOpts()
	}
	return clientOpts(p.cfg)
}

// Stats returns the counters.
func (p *Processor) Stats() Stats {
	st := Stats{
		SignalsConsumed: p.signals.Load(), RoutingEventsConsumed: p.routing.Load(),
		EstimatesPublished: p.published.Load(), DeadLettered: p.dead.Load(), Late: p.lateN.Load(),
		WindowsFired: p.fired.Load(), Checkpoints: p.ckpts.Load(),
		LastWindowEnd: time.UnixMilli(p.lastEnd.Load()),
	}
	if st.LastWindowEnd.UnixMilli() == 0 {
		st.LastWindowEnd = time.Time{}
	}
	return st
}

// Run consumes and produces through cl until ctx is done. cl must be
// created with p.ClientOpts() and must not be used by anything else
// while the processor runs; the caller closes it after Run returns. On
// cancel a single processor flushes and checkpoints (bounded by 6s);
// either mode then leaves the consumer group (bounded by 2s; a
// partitioned processor hands its partitions over as it leaves) and
// returns nil, whatever the brokers' state. Run may be called once.
func (p *Processor) Run(ctx context.Context, cl *kgo.Client) (err error) {
	if err := p.checkClient(cl); err != nil {
		return fmt.Errorf("processor: %w", err)
	}
	defer func() {
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil // stopped during startup
		}
	}()
	if p.inst != nil {
		return p.inst.run(ctx, cl)
	}
	p.cl = cl
	return p.runSingle(ctx)
}

// runSingle is Run of the single mode, through p.cl.
func (p *Processor) runSingle(ctx context.Context) error {
	p.log.Info("processor starting")
	if !p.noFinalCheckpoint { // a kill does not leave
		defer p.leaveGroup() // recovery.go
	}
	if err := p.ensureTopics(ctx); err != nil {
		return err
	}
	p.recordSettings(ctx)
	core, err := NewCore(p.topics, p.cfg.Spec(), p.cfg.Fitter)
	if err != nil {
		return err
	}
	core.SetRegistry(p.cfg.Registry)
	if err := p.resume(ctx, core); err != nil {
		return err
	}
	p.log.Info("processor running", "group", p.cfg.Group, "signals", p.topics.Signals, "routing_events", p.topics.RoutingEvents, "routing_arrivals", p.topics.RoutingArrivals,
		"window", p.cfg.Window, "slide", p.cfg.Slide, "allowed_lateness", p.cfg.AllowedLateness)
	return newRunner(p, core).loop(ctx)
}

// resume restores core from the group's latest checkpoint and tells it
// where each input partition's reading starts and ends. The checkpoint
// and the inputs' offsets are read concurrently (a dozen round trips that
// would otherwise add up before the first record is handled).
func (p *Processor) resume(ctx context.Context, core *Core) error {
	var (
		cp    Checkpoint
		found bool
		offs  inputOffsets
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		cp, found, err = readCheckpoint(gctx, p.cl, CheckpointTopic(p.cfg.TopicPrefix), p.cfg.Group)
		return err
	})
	g.Go(func() (err error) {
		offs, err = listInputs(gctx, p.cl, p.cfg.Group, p.topics.Inputs()...)
		return err
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if found {
		cp = p.sanitize(cp) // recovery.go
		core.Restore(cp)
		p.log.Info("restored checkpoint", "group", p.cfg.Group, "watermark_unix_ms", cp.Watermark, "partitions", len(cp.Partitions))
	}
	return trackPartitions(core, cp, offs)
}
