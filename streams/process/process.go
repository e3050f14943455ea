// Package processor is the `switchyard processor` service: it consumes
// engine signals and routing events in a consumer group, windows them by
// event time and publishes per-engine, per-cluster and per-(cluster,
// engine) estimates to the estimates topic (see docs/processor.md).
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
package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// Config configures the processor.
type Config struct {
	// KafkaBrokers are the bootstrap brokers. Required.
	KafkaBrokers []string
	// TopicPrefix names the topics (streams.TopicsFor). Default "switchyard".
	TopicPrefix string
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
	// Fitter fits latency profiles. Default estimate.ConvexFit.
	Fitter estimate.Fitter
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the processor's metrics; nil registers nothing.
	Registerer prometheus.Registerer
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
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a configuration error (after defaults).
func (c Config) Validate() error {
	if len(c.KafkaBrokers) == 0 {
		return errors.New("no kafka brokers")
	}
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

// Stats counts what the processor has done since it started.
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

// Service is a running processor.
type Service struct {
	cfg    Config
	topics streams.Topics
	log    *slog.Logger
	m      *metrics

	signals, routing, published, dead, lateN, fired, ckpts atomic.Uint64
	lastEnd                                                atomic.Int64

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

// New validates cfg and returns a processor.
func New(cfg Config) (*Service, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("processor config: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, topics: streams.TopicsFor(cfg.TopicPrefix), log: cfg.Logger, m: m, maxPoll: 10000}, nil
}

// Stats returns the counters.
func (s *Service) Stats() Stats {
	st := Stats{
		SignalsConsumed: s.signals.Load(), RoutingEventsConsumed: s.routing.Load(),
		EstimatesPublished: s.published.Load(), DeadLettered: s.dead.Load(), Late: s.lateN.Load(),
		WindowsFired: s.fired.Load(), Checkpoints: s.ckpts.Load(),
		LastWindowEnd: time.UnixMilli(s.lastEnd.Load()),
	}
	if st.LastWindowEnd.UnixMilli() == 0 {
		st.LastWindowEnd = time.Time{}
	}
	return st
}

// Run consumes until ctx is done. On cancel it flushes and checkpoints
// (bounded by 10s) and returns nil.
func (s *Service) Run(ctx context.Context) (err error) {
	defer func() {
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil // stopped during startup
		}
	}()
	s.log.Info("processor starting")
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(s.cfg.KafkaBrokers...),
		kgo.ConsumerGroup(s.cfg.Group),
		kgo.ConsumeTopics(s.topics.Signals, s.topics.RoutingEvents),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		// Throughput: up to 8 MiB per partition per fetch (default 1 MiB),
		// so catching up on a backlog takes fewer round trips.
		kgo.FetchMaxPartitionBytes(8<<20),
		kgo.DisableClientMetrics(),
	)
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	if err := s.ensureTopics(ctx, cl); err != nil {
		return err
	}
	core, err := NewCore(s.topics, s.cfg.Spec(), s.cfg.Fitter)
	if err != nil {
		return err
	}
	// The checkpoint and the inputs' offsets are read concurrently (a
	// dozen round trips that would otherwise add up before the first
	// record is handled).
	var (
		cp    Checkpoint
		found bool
		offs  inputOffsets
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		cp, found, err = readCheckpoint(gctx, cl, CheckpointTopic(s.cfg.TopicPrefix), s.cfg.Group)
		return err
	})
	g.Go(func() (err error) {
		offs, err = listInputs(gctx, cl, s.cfg.Group, s.topics.Signals, s.topics.RoutingEvents)
		return err
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if found {
		core.Restore(cp)
		s.log.Info("restored checkpoint", "group", s.cfg.Group, "watermark_unix_ms", cp.Watermark, "partitions", len(cp.Partitions))
	}
	if err := trackPartitions(core, cp, offs); err != nil {
		return err
	}
	s.log.Info("processor running", "group", s.cfg.Group, "signals", s.topics.Signals, "routing_events", s.topics.RoutingEvents,
		"window", s.cfg.Window, "slide", s.cfg.Slide, "allowed_lateness", s.cfg.AllowedLateness)
	r := &runner{s: s, cl: cl, core: core, dlq: streams.NewDeadLetter(cl, s.topics.DeadLetter), acks: newAcks(), lastCkpt: time.Now(), progress: map[tp]time.Time{}}
	for range max(1, runtime.GOMAXPROCS(0)) {
		r.encs = append(r.encs, &estimate.Encoder{})
	}
	return r.loop(ctx)
}

type runner struct {
	s    *Service
	cl   *kgo.Client
	core *Core
	dlq  *streams.DeadLetter
	acks *acks
	// encs encode the writer's estimates (marshalAll), one per core.
	encs []*estimate.Encoder

	// Owned by the loop.
	// counts are the outcomes of the records handled since the last
	// flushCounts, by input (0 signals, 1 routing events) and Outcome.
	counts [2][4]uint64
	// epoch numbers the batches handed to the writer; outputs produced
	// for a batch (its estimates, the dead letters before it) carry its
	// epoch, and its checkpoint waits for every epoch up to its own.
	epoch uint64
	dirty bool // dead letters since the last checkpoint
	// pendingEnd is the end of the latest fired window.
	pendingEnd int64
	// progress is when each partition last delivered a record (or was
	// first seen waiting), for the stalled-partition rule.
	progress map[tp]time.Time
	lastCkpt time.Time
}

// batch is what the loop hands the writer: fired windows to publish and
// the checkpoint taken right after they fired.
type batch struct {
	epoch uint64
	fired []firedWindow
	cp    Checkpoint
	end   int64 // end of the latest window fired so far
}

// loop consumes and handles records and fires windows; a writer
// goroutine publishes the fired windows' estimates and writes the
// checkpoints in order (see write), so consuming goes on while outputs
// are encoded, produced and acknowledged. The channel between them is
// bounded: a slow writer slows the loop down.
func (r *runner) loop(ctx context.Context) (err error) {
	s := r.s
	// The writer outlives ctx to publish the final checkpoint; pctx stops
	// polling when the writer fails.
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer wcancel()
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	in := make(chan batch, 2)
	done := make(chan struct{})
	var werr error
	go func() {
		defer close(done)
		if werr = r.write(wctx, in); werr != nil {
			pcancel()
		}
	}()
	closed := false
	stop := func() error { // stops the writer at once (a kill or an error)
		wcancel()
		if !closed {
			close(in)
			closed = true
		}
		<-done
		return werr
	}
	send := func(b batch) error {
		select {
		case in <- b:
			return nil
		case <-done:
			return werr
		}
	}
	r.epoch = 1
	for {
		fetches := r.cl.PollRecords(pctx, s.maxPoll)
		if ctx.Err() != nil {
			if s.noFinalCheckpoint {
				_ = stop()
				return nil
			}
			if err := send(batch{epoch: r.epoch, cp: r.core.Checkpoint(), end: r.pendingEnd}); err != nil {
				_ = stop()
				return err
			}
			close(in)
			closed = true
			t := time.NewTimer(10 * time.Second)
			defer t.Stop()
			select {
			case <-done:
			case <-t.C:
				wcancel()
				<-done
			}
			if werr != nil {
				return fmt.Errorf("final checkpoint: %w", werr)
			}
			return nil
		}
		if pctx.Err() != nil { // the writer failed
			return stop()
		}
		var fetchErr error
		fetches.EachError(func(t string, p int32, err error) {
			if fetchErr == nil && !errors.Is(err, context.Canceled) {
				fetchErr = fmt.Errorf("fetching %s/%d: %w", t, p, err)
			}
		})
		if fetchErr != nil {
			s.log.Warn("fetch error", "err", fetchErr)
		}
		now := time.Now()
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			r.core.SetEnd(p.Topic, p.Partition, p.HighWatermark)
			if len(p.Records) > 0 {
				r.progress[tp{p.Topic, p.Partition}] = now
			}
			p.EachRecord(r.handle)
		})
		r.flushCounts()
		if h := s.onHandled; h != nil && fetches.NumRecords() > 0 {
			h(fetches.NumRecords())
		}
		r.releaseStalled(now)
		fired := r.core.fire()
		for _, f := range fired {
			r.pendingEnd = max(r.pendingEnd, f.end)
			s.fired.Add(1)
			s.m.windows.Inc()
		}
		s.m.watermark.Set(float64(r.core.Watermark().UnixMilli()) / 1000)
		s.m.openPanes.Set(float64(r.core.OpenPanes()))
		if len(fired) > 0 || (r.dirty && time.Since(r.lastCkpt) > time.Second) {
			if err := send(batch{epoch: r.epoch, fired: fired, cp: r.core.Checkpoint(), end: r.pendingEnd}); err != nil {
				_ = stop()
				return err
			}
			r.epoch++
			r.dirty = false
			r.lastCkpt = now
		}
	}
}

// write computes and publishes each batch's estimates and writes its
// checkpoint, in order, until in is closed or an error (a failed output
// or checkpoint) stops it. Publishing and checkpointing run on two
// goroutines: while a checkpoint waits for its outputs' acknowledgements
// and for Kafka to take it, the next batches' estimates are computed and
// produced. Every batch still gets its checkpoint, in order, and each
// one only after every output up to its batch is acknowledged.
func (r *runner) write(ctx context.Context, in <-chan batch) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// At most a few published batches wait for their checkpoints, so a
	// slow checkpoint slows publishing down.
	published := make(chan batch, 4)
	ckptErr := make(chan error, 1)
	go func() {
		for b := range published {
			if err := r.checkpoint(ctx, b); err != nil {
				cancel() // stops publishing
				for range published {
				}
				ckptErr <- err
				return
			}
		}
		ckptErr <- nil
	}()
	var err error
publishing:
	for {
		var b batch
		select {
		case nb, ok := <-in:
			if !ok {
				break publishing
			}
			b = nb
		case <-ctx.Done():
			break publishing
		}
		if err = r.publish(ctx, b); err != nil {
			break
		}
		b.fired = nil // published: the checkpoint needs none of the window state
		select {
		case published <- b:
		case <-ctx.Done():
			break publishing
		}
	}
	close(published)
	if cerr := <-ckptErr; cerr != nil {
		return cerr
	}
	if err == nil {
		err = ctx.Err() // stopped from outside before the last checkpoint
	}
	return err
}

// publish computes and produces the estimates of b's windows.
func (r *runner) publish(ctx context.Context, b batch) error {
	// Outputs are produced without ctx: once fired they must reach Kafka
	// before the final checkpoint.
	pctx := context.WithoutCancel(ctx)
	epoch := b.epoch
	var acked [3]func(*kgo.Record, error)
	for k := range acked {
		published := r.s.m.published[k]
		acked[k] = func(_ *kgo.Record, err error) {
			r.acks.done(epoch, err)
			if err == nil {
				r.s.published.Add(1)
				published.Inc()
			}
		}
	}
	for _, w := range b.fired {
		f := r.core.estimates(w, true) // encoded and dropped
		keys, vals, err := marshalAll(f.Estimates, r.encs)
		if err != nil {
			return err
		}
		recs := make([]kgo.Record, len(f.Estimates))
		ts := time.UnixMilli(f.End)
		r.acks.add(epoch, len(recs))
		for i, e := range f.Estimates {
			rec := &recs[i]
			rec.Topic, rec.Key, rec.Value, rec.Timestamp = r.s.topics.Estimates, keys[i], vals[i], ts
			r.cl.Produce(pctx, rec, acked[estimateKind(e)])
		}
	}
	return nil
}

// marshalAll encodes one window's estimates (estimate.Marshal) and
// their keys (estimate.Key), a chunk per encoder, each on its own
// goroutine into one buffer its keys and values share; the bytes do not
// depend on the encoders. Each encoder then rotates (one generation per
// window).
func marshalAll(ests []*schemas.Estimate, encs []*estimate.Encoder) (keys, vals [][]byte, err error) {
	keys = make([][]byte, len(ests))
	vals = make([][]byte, len(ests))
	errs := make([]error, len(ests))
	chunk := max(256, (len(ests)+len(encs)-1)/len(encs))
	var wg sync.WaitGroup
	for w, lo := 0, 0; lo < len(ests); w, lo = w+1, lo+chunk {
		hi := min(lo+chunk, len(ests))
		enc := encs[w]
		wg.Go(func() {
			size := 0
			for _, e := range ests[lo:hi] {
				size += 64
				if _, ok := e.GetKind().(*schemas.Estimate_Engine); ok {
					size += 640 // two profiles
				}
			}
			buf := make([]byte, 0, size)
			for i := lo; i < hi; i++ {
				at := len(buf)
				buf = estimate.AppendKey(buf, ests[i])
				keys[i] = buf[at:len(buf):len(buf)]
				at = len(buf)
				buf, errs[i] = enc.AppendMarshal(buf, ests[i])
				vals[i] = buf[at:len(buf):len(buf)]
			}
		})
	}
	wg.Wait()
	for _, enc := range encs {
		enc.Rotate()
	}
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	return keys, vals, nil
}

// estimateKind indexes metrics.published: 0 engine, 1 demand, 2 network.
func estimateKind(e *schemas.Estimate) int {
	switch e.GetKind().(type) {
	case *schemas.Estimate_Engine:
		return 0
	case *schemas.Estimate_Demand:
		return 1
	}
	return 2
}

// acks tracks produced outputs by epoch until Kafka acknowledges them.
type acks struct {
	mu      sync.Mutex
	cond    sync.Cond
	pending map[uint64]int
	err     error // the first failed output
}

func newAcks() *acks {
	a := &acks{pending: map[uint64]int{}}
	a.cond.L = &a.mu
	return a
}

// add counts n more outputs of epoch.
func (a *acks) add(epoch uint64, n int) {
	if n <= 0 {
		return // no entry that nothing would ever complete
	}
	a.mu.Lock()
	a.pending[epoch] += n
	a.mu.Unlock()
}

// done acknowledges one output of epoch; waiters wake only when an epoch
// completes or an output fails.
func (a *acks) done(epoch uint64, err error) {
	a.mu.Lock()
	wake := false
	if a.pending[epoch]--; a.pending[epoch] <= 0 {
		delete(a.pending, epoch)
		wake = true
	}
	if err != nil && a.err == nil {
		a.err = err
		wake = true
	}
	if wake {
		a.cond.Broadcast()
	}
	a.mu.Unlock()
}

// wait returns once every output of the epochs up to epoch is
// acknowledged, or an output failed, or ctx is done.
func (a *acks) wait(ctx context.Context, epoch uint64) error {
	stop := context.AfterFunc(ctx, func() {
		a.mu.Lock()
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	defer stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if a.err != nil {
			return fmt.Errorf("producing outputs: %w", a.err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for outputs: %w", err)
		}
		busy := false
		for e := range a.pending {
			if e <= epoch {
				busy = true
				break
			}
		}
		if !busy {
			return nil
		}
		a.cond.Wait()
	}
}

// stalledAfter is how long a partition may have unread records without
// delivering any before it stops holding the watermark back.
const stalledAfter = 30 * time.Second

// releaseStalled marks partitions that have had unread records but
// delivered nothing for stalledAfter as caught up (wall-clock liveness
// rule; it never applies while records flow).
func (r *runner) releaseStalled(now time.Time) {
	for _, k := range r.core.pending() {
		since, ok := r.progress[k]
		if !ok {
			r.progress[k] = now
			continue
		}
		if now.Sub(since) > stalledAfter {
			r.s.log.Warn("partition stalled; no longer holding the watermark", "topic", k.Topic, "partition", k.Partition)
			r.core.markCaughtUp(k)
			delete(r.progress, k)
		}
	}
}

func (r *runner) handle(rec *kgo.Record) {
	s := r.s
	out, reason := r.core.Handle(rec)
	in := 0
	if rec.Topic == s.topics.RoutingEvents {
		in = 1
	}
	if int(out) < len(r.counts[in]) {
		r.counts[in][out]++ // counted in flushCounts
	}
	if out == DeadLettered {
		code, _, _ := cutReason(reason)
		s.m.deadLetters.WithLabelValues(code).Inc()
		s.log.Debug("dead-lettering record", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "reason", reason)
		r.dirty = true
		r.acks.add(r.epoch, 1)
		epoch := r.epoch
		r.cl.Produce(context.Background(), r.dlq.Record(rec, reason), func(_ *kgo.Record, err error) { r.acks.done(epoch, err) })
	}
}

// flushCounts adds the outcomes counted since the last flush to the
// stats and metrics (once per poll rather than per record).
func (r *runner) flushCounts() {
	s := r.s
	for in := range r.counts {
		for out, n := range r.counts[in] {
			if n == 0 {
				continue
			}
			s.m.outcomes[in][out].Add(float64(n))
			switch Outcome(out) {
			case Accepted:
				if in == 0 {
					s.signals.Add(n)
				} else {
					s.routing.Add(n)
				}
			case Late:
				s.lateN.Add(n)
			case DeadLettered:
				s.dead.Add(n)
			}
		}
	}
	r.counts = [2][4]uint64{}
}

func cutReason(reason string) (code, detail string, ok bool) {
	for i := 0; i+1 < len(reason); i++ {
		if reason[i] == ':' && reason[i+1] == ' ' {
			return reason[:i], reason[i+2:], true
		}
	}
	return reason, "", false
}

// checkpoint waits until every output up to b is acknowledged, then
// writes b's checkpoint and commits its resume offsets to the group.
func (r *runner) checkpoint(ctx context.Context, b batch) error {
	if err := r.acks.wait(ctx, b.epoch); err != nil {
		return err
	}
	if h := r.s.beforeCheckpoint; h != nil {
		if err := h(); err != nil {
			return err
		}
	}
	cp := b.cp
	v, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("encoding checkpoint: %w", err)
	}
	rec := &kgo.Record{Topic: CheckpointTopic(r.s.cfg.TopicPrefix), Key: []byte(r.s.cfg.Group), Value: v}
	if err := r.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	offs := map[string]map[int32]kgo.EpochOffset{}
	for _, m := range cp.Partitions {
		if offs[m.Topic] == nil {
			offs[m.Topic] = map[int32]kgo.EpochOffset{}
		}
		offs[m.Topic][m.Partition] = kgo.EpochOffset{Epoch: -1, Offset: m.Resume}
	}
	var commitErr error
	r.cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil && commitErr == nil {
					commitErr = e
				}
			}
		}
	})
	if commitErr != nil {
		// The checkpoint already holds the offsets; a failed group commit
		// only means the next start replays a little more.
		r.s.log.Warn("committing group offsets", "err", commitErr)
	}
	if b.end > r.s.lastEnd.Load() {
		r.s.lastEnd.Store(b.end)
	}
	r.s.ckpts.Add(1)
	if h := r.s.onCheckpoint; h != nil {
		h()
	}
	r.s.m.checkpoints.Inc()
	return nil
}

func (s *Service) ensureTopics(ctx context.Context, cl *kgo.Client) error {
	// One metadata request usually finds every topic there; only a
	// missing one costs the creation requests.
	all := append(s.topics.All(), CheckpointTopic(s.cfg.TopicPrefix))
	if details, err := kadm.NewClient(cl).ListTopics(ctx, all...); err == nil {
		exist := 0
		for _, t := range all {
			if d, ok := details[t]; ok && d.Err == nil {
				exist++
			}
		}
		if exist == len(all) {
			return nil
		}
	}
	if err := streams.EnsureTopics(ctx, cl, s.topics, s.cfg.Partitions); err != nil {
		return err
	}
	compact := "compact"
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, CheckpointTopic(s.cfg.TopicPrefix))
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating checkpoint topic: %w", err)
	}
	return nil
}

// readCheckpoint returns the latest checkpoint of group. It reads the
// checkpoint partition with plain Fetch requests through cl (no second
// client to connect and close), from the log start to the end offset
// listed when it starts.
func readCheckpoint(ctx context.Context, cl *kgo.Client, topic, group string) (Checkpoint, bool, error) {
	var cp Checkpoint
	adm := kadm.NewClient(cl)
	ends, err := listOffsets(ctx, cl, adm.ListEndOffsets, []string{topic})
	if err != nil {
		return cp, false, fmt.Errorf("listing checkpoint offsets: %w", err)
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || end.Err != nil {
		return cp, false, fmt.Errorf("listing checkpoint offsets: %v", end.Err)
	}
	if end.Offset <= 0 {
		return cp, false, nil
	}
	starts, err := listOffsets(ctx, cl, adm.ListStartOffsets, []string{topic})
	if err != nil {
		return cp, false, fmt.Errorf("listing checkpoint offsets: %w", err)
	}
	off := int64(0)
	if so, ok := starts.Lookup(topic, 0); ok && so.Err == nil {
		off = so.Offset
	}
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return cp, false, fmt.Errorf("checkpoint topic metadata: %w", err)
	}
	pm, ok := md.Topics[topic].Partitions[0]
	if !ok || pm.Leader < 0 {
		return cp, false, fmt.Errorf("checkpoint topic %s has no leader", topic)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	found := false
	for off < end.Offset {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 500, 1, 16<<20
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, md.Topics[topic].ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = 0, off, 16<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(rctx, cl.Broker(int(pm.Leader)))
		if err != nil {
			return cp, false, fmt.Errorf("reading checkpoints: %w", err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return cp, false, fmt.Errorf("reading checkpoints: %w", err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return cp, false, errors.New("reading checkpoints: unexpected fetch response")
		}
		fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: off, Topic: topic, Partition: 0},
			&resp.Topics[0].Partitions[0], kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return cp, false, fmt.Errorf("reading checkpoints at offset %d: %w", off, fp.Err)
		}
		if len(fp.Records) == 0 {
			// Nothing readable below the end offset listed at start
			// (e.g. it ends in control records).
			break
		}
		for _, rec := range fp.Records {
			off = rec.Offset + 1
			if string(rec.Key) != group || rec.Offset >= end.Offset {
				continue
			}
			var c Checkpoint
			if err := json.Unmarshal(rec.Value, &c); err != nil {
				return cp, false, fmt.Errorf("decoding checkpoint at offset %d: %w", rec.Offset, err)
			}
			cp, found = c, true
		}
	}
	return cp, found, nil
}

// trackPartitions tells core where each input partition's reading starts
// (the checkpoint's resume offset, else the log start) and ends. The
// processor is meant to be the group's only active member: it tracks all
// partitions of its inputs.
func trackPartitions(core *Core, cp Checkpoint, offs inputOffsets) error {
	starts, ends := offs.starts, offs.ends
	resume := map[tp]int64{}
	// Consumption starts at the group's committed offsets (which follow
	// the checkpoint, see checkpoint); without them, at the checkpoint's
	// resume offsets; without either, at the log start.
	offs.committed.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			resume[tp{o.Topic, o.Partition}] = o.At
		}
	})
	for _, m := range cp.Partitions {
		if _, ok := resume[tp{m.Topic, m.Partition}]; !ok {
			resume[tp{m.Topic, m.Partition}] = m.Resume
		}
	}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = fmt.Errorf("listing end offset of %s/%d: %w", o.Topic, o.Partition, o.Err)
			return
		}
		start := int64(0)
		if so, ok := starts.Lookup(o.Topic, o.Partition); ok && so.Err == nil {
			start = so.Offset
		}
		if r, ok := resume[tp{o.Topic, o.Partition}]; ok {
			start = max(start, r)
		}
		core.Track(o.Topic, o.Partition, start, o.Offset)
	})
	return lerr
}

// inputOffsets are the input partitions' start and end offsets and the
// group's committed offsets.
type inputOffsets struct {
	starts, ends kadm.ListedOffsets
	committed    kadm.OffsetResponses
}

// listInputs lists inputOffsets of topics for group, the three requests
// concurrently.
func listInputs(ctx context.Context, cl *kgo.Client, group string, topics ...string) (inputOffsets, error) {
	adm := kadm.NewClient(cl)
	var o inputOffsets
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		if o.starts, err = listOffsets(gctx, cl, adm.ListStartOffsets, topics); err != nil {
			return fmt.Errorf("listing start offsets: %w", err)
		}
		return nil
	})
	g.Go(func() (err error) {
		if o.ends, err = listOffsets(gctx, cl, adm.ListEndOffsets, topics); err != nil {
			return fmt.Errorf("listing end offsets: %w", err)
		}
		return nil
	})
	g.Go(func() (err error) {
		if o.committed, err = adm.FetchOffsets(gctx, group); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return fmt.Errorf("fetching committed offsets: %w", err)
		}
		return nil
	})
	return o, g.Wait()
}

// listOffsets lists offsets with list, retrying for up to 5s while the
// client's metadata does not know a topic yet (just created).
func listOffsets(ctx context.Context, cl *kgo.Client, list func(context.Context, ...string) (kadm.ListedOffsets, error), topics []string) (kadm.ListedOffsets, error) {
	deadline := time.Now().Add(5 * time.Second)
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 500*time.Millisecond) {
		lo, err := list(ctx, topics...)
		if err != nil {
			return lo, err
		}
		unknown := false
		lo.Each(func(o kadm.ListedOffset) {
			unknown = unknown || errors.Is(o.Err, kerr.UnknownTopicOrPartition)
		})
		if !unknown || time.Now().After(deadline) {
			return lo, nil
		}
		cl.ForceMetadataRefresh()
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return lo, ctx.Err()
		case <-t.C:
		}
	}
}
