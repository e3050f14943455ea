package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// PartialsTopic is the compacted topic partitioned processing hands each
// input partition's partial on in, keyed "<topic>/<partition>".
func PartialsTopic(prefix string) string {
	if prefix == "" {
		prefix = streams.DefaultPrefix
	}
	return prefix + ".processor.partials"
}

// sanitizeState drops the window clock of a combiner state dated beyond
// now plus maxSkew (negative: no limit), as the single processor drops
// such a checkpoint's (recovery.go): restored, it would fire windows
// before their records are in.
func sanitizeState(st combinerState, now time.Time, maxSkew time.Duration) combinerState {
	if maxSkew < 0 {
		return st
	}
	if lim := now.Add(maxSkew).UnixMilli(); st.Watermark > lim || st.Next > lim {
		st.Watermark, st.Next = 0, 0
	}
	return st
}

// instance is the partitioned mode of a Processor (Config.Partitioned):
// it runs the shard of every input partition the consumer group assigns
// it and publishes the shards' partials and per-partition checkpoints; a
// combiner (RunCombiner) turns the partials into estimates.
type instance struct {
	cfg    Config
	topics streams.Topics
	log    *slog.Logger
	// stats are the Processor's counters; m counts through the client's
	// hooks (clientOpts).
	stats *counters
	m     *instanceMetrics

	mu     sync.Mutex
	cl     *kgo.Client
	shards map[tp]*instShard
	err    error // from a callback
	// killed (a test hook) makes the instance stop as if killed: no
	// hand-over, no leaving the group.
	killed bool
	// crash (a test hook), when set, is asked after each step of a
	// publication ("chunks", "header", "checkpoint"; n records written,
	// replaced the chunks of earlier generations the publication
	// replaces); true stops the publication there and kills the
	// instance, as a process killed at that point.
	crash func(step string, n, replaced int) bool
	// stalledAfter: an owned partition with unread records that
	// delivers none for this long is released (shard.Release); the
	// single processor's stalledAfter, shorter in tests. Polls end at
	// least every stalledAfter/4 so that the rule applies while no
	// partition delivers anything.
	stalledAfter time.Duration
	// progress is when each pending partition last delivered records
	// (or became pending).
	progress map[tp]time.Time
	// publishEvery is the least time between two rounds of partials
	// (publishEvery in tests); nextPublish is when the next may go.
	publishEvery time.Duration
	nextPublish  time.Time
	// alarm logs registry dead-letters (registry.go).
	alarm *alarm
}

// publishEvery bounds how often an instance publishes its partitions'
// partials: a partial is the partition's whole state (megabytes at
// thousands of engines), while polls under a steady input return every
// few milliseconds. The combiner then learns of new records up to this
// much later; it never fires a window before it has them.
const publishEvery = time.Second

type instShard struct {
	s         *shard
	fetched   bool // a fetch of the partition was handled
	published bool // a partial was published since the last change
	// gen and chunks name the chunks of the partition's latest partial
	// (this instance's, or the previous owner's from the latest header
	// on the partials topic), deleted once a newer header replaces it;
	// gen 0: none known.
	gen    uint64
	chunks int
}

// shardCheckpoint is a partition's checkpoint: the shard's, and the
// chunks of the partial it covers (for reading; a new owner takes the
// chunks to replace from the latest header, see deleteOrphans).
type shardCheckpoint struct {
	Checkpoint
	PartialGen    string `json:"partial_gen,omitempty"`
	PartialChunks int    `json:"partial_chunks,omitempty"`
}

// publication is one partition's partial as records: its chunks, its
// header, and what follows the header: its checkpoint, then the
// tombstones of the chunks it replaces.
type publication struct {
	sh     *instShard
	gen    uint64
	chunks int
	data   []*kgo.Record
	header *kgo.Record
	ckpt   []*kgo.Record
	tombs  []*kgo.Record
}

// newInstance returns an instance for cfg (with its defaults applied and
// validated, as New does) counting into stats, and registers its metrics
// with cfg.Registerer.
func newInstance(cfg Config, stats *counters) (*instance, error) {
	in := &instance{cfg: cfg, topics: streams.TopicsFor(cfg.TopicPrefix), log: cfg.Logger, stats: stats, shards: map[tp]*instShard{},
		stalledAfter: stalledAfter, progress: map[tp]time.Time{}, publishEvery: publishEvery, alarm: newAlarm(cfg.Logger)}
	m, err := newInstanceMetrics(cfg.Registerer, in.topics, PartialsTopic(cfg.TopicPrefix), in.owned)
	if err != nil {
		return nil, err
	}
	in.m = m
	return in, nil
}

// clientOpts are clientOpts(cfg) plus the cooperative-sticky balancer,
// rebalances held while a poll is handled, the instance's assignment
// callbacks and its metrics' hooks.
func (in *instance) clientOpts() []kgo.Opt {
	return append(clientOpts(in.cfg),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(in.assigned),
		kgo.OnPartitionsRevoked(in.revoked),
		kgo.OnPartitionsLost(in.lost),
		kgo.WithHooks(in.m),
	)
}

func ckptKey(group string, k tp) string {
	return group + "/" + k.Topic + "/" + strconv.Itoa(int(k.Partition))
}

// assigned creates the shards of newly assigned partitions from their
// checkpoints; consumption starts at the group's committed offset, which
// is the checkpoint's resume offset (committed after it).
func (in *instance) assigned(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.log.Info("partitions assigned", "partitions", fmt.Sprint(parts))
	if len(parts) == 0 {
		return // a cooperative round that moves nothing here
	}
	topics := make([]string, 0, len(parts))
	for t := range parts {
		topics = append(topics, t)
	}
	// Not the group's committed offsets: fetching them from inside the
	// group's own rebalance waits for it (13 s in tests); they equal the
	// checkpoints' resume offsets.
	adm := kadm.NewClient(cl)
	starts, err := listOffsets(ctx, cl, adm.ListStartOffsets, topics)
	if err != nil {
		in.fail(fmt.Errorf("listing assigned partitions: %w", err))
		return
	}
	ends, err := listOffsets(ctx, cl, adm.ListEndOffsets, topics)
	if err != nil {
		in.fail(fmt.Errorf("listing assigned partitions: %w", err))
		return
	}
	cps, err := readCheckpoints(ctx, cl, CheckpointTopic(in.cfg.TopicPrefix), in.cfg.Group+"/")
	if err != nil {
		in.fail(fmt.Errorf("reading the partitions' checkpoints: %w", err))
		return
	}
	// The chunks of the partitions' partials that no latest header names
	// (a previous owner was killed mid-publication) are deleted; the
	// shards name the latest headers' chunks, which their first partial
	// replaces.
	bases := map[string]bool{}
	for topic, ps := range parts {
		for _, part := range ps {
			bases[partialKey(tp{topic, part})] = true
		}
	}
	gens, err := deleteOrphans(ctx, cl, PartialsTopic(in.cfg.TopicPrefix), bases, in.log)
	if err != nil {
		in.fail(err)
		return
	}
	var pubs []publication
	for topic, ps := range parts {
		for _, part := range ps {
			k := tp{topic, part}
			s, err := newShard(in.topics, in.cfg.Spec(), topic, part)
			if err != nil {
				in.fail(err)
				return
			}
			s.SetRegistry(in.cfg.Registry)
			cp, found := cps[ckptKey(in.cfg.Group, k)]
			if found {
				s.Restore(cp.Checkpoint)
			}
			// Where reading starts (the checkpoint's resume offset, which
			// the group has committed) and where the log ends.
			start, end := int64(0), int64(0)
			if o, ok := starts.Lookup(topic, part); ok && o.Err == nil {
				start = o.Offset
			}
			for _, m := range cp.Partitions {
				start = max(start, m.Resume)
			}
			if o, ok := ends.Lookup(topic, part); ok && o.Err == nil {
				end = o.Offset
			}
			s.Track(start, end)
			// The latest header's chunks, not the checkpoint's: an owner
			// killed between a header and its checkpoint left the
			// checkpoint naming the chunks that header replaced.
			g := gens[partialKey(k)]
			sh := &instShard{s: s, fetched: true, gen: g.gen, chunks: g.chunks}
			in.shards[k] = sh
			// Nothing to re-read: the partial stands for the partition
			// now, even if no record comes.
			if s.Rebuilt() {
				pub, err := in.publication(k, sh, s.partial(), true)
				if err != nil {
					in.fail(err)
					return
				}
				pubs = append(pubs, pub)
			}
		}
	}
	if err := in.publish(ctx, cl, pubs); err != nil {
		in.fail(err)
	}
}

// fail records the first error of a callback; Run returns it.
func (in *instance) fail(err error) {
	if in.err == nil {
		in.err = err
	}
}

// revoked hands revoked partitions over: their partials and checkpoints
// are published after every poll, before rebalances are allowed, so the
// next owner restores what this one had; one last partial marks each as
// having unread records, so that the combiner's watermark waits for the
// next owner instead of passing the partition while it has none.
func (in *instance) revoked(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.log.Info("partitions revoked", "partitions", fmt.Sprint(parts))
	if in.killed {
		return
	}
	var recs []*kgo.Record
	for topic, ps := range parts {
		for _, part := range ps {
			k := tp{topic, part}
			sh := in.shards[k]
			delete(in.shards, k)
			if sh == nil || !sh.fetched || !sh.s.Rebuilt() {
				continue // the previous partial stands
			}
			p := sh.s.partial()
			p.Pending = true
			if sh.published && sh.gen != 0 {
				// The panes are the last partial's: a header naming its
				// chunks again hands the partition over.
				recs = append(recs, in.headerRecord(k, appendHeader(nil, p, sh.gen, sh.chunks)))
				continue
			}
			// Changes not yet published (publishEvery): the partial and
			// the checkpoint the next owner restores.
			pub, err := in.publication(k, sh, p, true)
			if err != nil {
				in.log.Warn("handing over", "topic", topic, "partition", part, "err", err)
				continue
			}
			if err := in.publish(ctx, cl, []publication{pub}); err != nil {
				in.log.Warn("handing over", "topic", topic, "partition", part, "err", err)
			}
		}
	}
	if len(recs) > 0 {
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			in.log.Warn("handing over partitions", "err", err)
		}
	}
}

// lost forgets partitions the group took away without a revocation (the
// session expired): their last partials stand.
func (in *instance) lost(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.log.Warn("partitions lost", "partitions", fmt.Sprint(parts))
	for topic, ps := range parts {
		for _, part := range ps {
			delete(in.shards, tp{topic, part})
		}
	}
}

// partialContentType is the content type of the partials topic's
// values (partitioned_codec.go).
const partialContentType = "application/x-switchyard-partial"

func (in *instance) headerRecord(k tp, v []byte) *kgo.Record {
	return &kgo.Record{Topic: PartialsTopic(in.cfg.TopicPrefix), Key: []byte(partialKey(k)), Value: v,
		Headers: streams.Headers(partialContentType, schemas.Package+".Partial")}
}

// publication encodes p, the partial of partition k, as a new
// generation of chunks and its header; with ckpt, the shard's checkpoint
// follows the header.
func (in *instance) publication(k tp, sh *instShard, p partial, ckpt bool) (publication, error) {
	gen := newGen()
	hdr, chunks := encodePartial(p, gen)
	pub := publication{sh: sh, gen: gen, chunks: len(chunks), header: in.headerRecord(k, hdr)}
	base := partialKey(k)
	for i, c := range chunks {
		pub.data = append(pub.data, &kgo.Record{Topic: PartialsTopic(in.cfg.TopicPrefix), Key: []byte(chunkKey(base, gen, i)), Value: c,
			Headers: streams.Headers(partialContentType, schemas.Package+".PartialChunk")})
	}
	if ckpt {
		cv, err := json.Marshal(shardCheckpoint{Checkpoint: sh.s.Checkpoint(), PartialGen: fmt.Sprintf("%016x", gen), PartialChunks: len(chunks)})
		if err != nil {
			return publication{}, fmt.Errorf("encoding checkpoint: %w", err)
		}
		pub.ckpt = append(pub.ckpt, &kgo.Record{Topic: CheckpointTopic(in.cfg.TopicPrefix), Key: []byte(ckptKey(in.cfg.Group, k)), Value: cv,
			Headers: streams.Headers(schemas.ContentTypeJSON, CheckpointMessage)})
	}
	for i := range sh.chunks {
		if sh.gen == 0 {
			break
		}
		pub.tombs = append(pub.tombs, &kgo.Record{Topic: PartialsTopic(in.cfg.TopicPrefix), Key: []byte(chunkKey(base, sh.gen, i))})
	}
	return pub, nil
}

// publish produces the publications' chunks, then, once Kafka has them,
// their headers, then their checkpoints, then the tombstones of the
// chunks they replace; each shard then names its new chunks. An
// instance killed between two steps leaves chunks no header names (of
// the new generation, or of the replaced one): the partition's next
// owner deletes them (deleteOrphans).
func (in *instance) publish(ctx context.Context, cl *kgo.Client, pubs []publication) error {
	if len(pubs) == 0 {
		return nil
	}
	var data, headers, ckpts, tombs []*kgo.Record
	for _, p := range pubs {
		data = append(data, p.data...)
		headers = append(headers, p.header)
		ckpts = append(ckpts, p.ckpt...)
		tombs = append(tombs, p.tombs...)
	}
	replaced := len(tombs)
	if err := in.produce(ctx, cl, data, "chunks", replaced); err != nil {
		return fmt.Errorf("publishing partials: %w", err)
	}
	if err := in.produce(ctx, cl, headers, "header", replaced); err != nil {
		return fmt.Errorf("publishing partials: %w", err)
	}
	for _, p := range pubs {
		p.sh.gen, p.sh.chunks, p.sh.published = p.gen, p.chunks, true
	}
	if err := in.produce(ctx, cl, ckpts, "checkpoint", replaced); err != nil {
		return fmt.Errorf("writing checkpoints: %w", err)
	}
	if err := in.produce(ctx, cl, tombs, "", replaced); err != nil {
		return fmt.Errorf("deleting replaced partial chunks: %w", err)
	}
	return nil
}

// produce produces recs (if any) and waits for Kafka to have them; then
// the crash hook may stop the instance after that step of a publication
// replacing replaced chunks.
func (in *instance) produce(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, step string, replaced int) error {
	if len(recs) > 0 {
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return err
		}
	}
	if step != "" && in.crash != nil && in.crash(step, len(recs), replaced) {
		in.killed = true
		return fmt.Errorf("killed after the %s (test hook)", step)
	}
	return nil
}

// newGen returns a generation for new chunks: random, never 0.
func newGen() uint64 {
	for {
		if g := rand.Uint64(); g != 0 {
			return g
		}
	}
}

// owned is the number of input partitions the instance processes now.
func (in *instance) owned() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.shards)
}

// run consumes through cl (created with clientOpts) until ctx is done.
func (in *instance) run(ctx context.Context, cl *kgo.Client) error {
	in.mu.Lock()
	in.cl = cl
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		killed := in.killed
		in.mu.Unlock()
		if killed {
			return
		}
		lctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer cancel()
		_ = cl.LeaveGroupContext(lctx)
	}()
	if err := ensurePartitionedTopics(ctx, cl, in.cfg); err != nil {
		return err
	}
	dlq := streams.NewDeadLetter(cl, in.topics.DeadLetter)
	for {
		pctx, cancel := context.WithTimeout(ctx, in.pollWait(time.Now()))
		fetches := cl.PollRecords(pctx, 10000)
		cancel()
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		err := in.handle(ctx, cl, dlq, fetches)
		cl.AllowRebalance()
		if err != nil && ctx.Err() != nil {
			// Stopped mid-publish: what was not written is rebuilt from
			// the last checkpoint by the partitions' next owner.
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// pollWait is how long the next poll may wait for records: until the
// stalled-partition rule must be checked, or until changes not yet
// published may be.
func (in *instance) pollWait(now time.Time) time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	wait := in.stalledAfter / 4
	for _, sh := range in.shards {
		if !sh.published && sh.fetched && sh.s.Rebuilt() {
			return max(min(wait, in.nextPublish.Sub(now)), time.Millisecond)
		}
	}
	return wait
}

// handle folds one poll into the shards, then publishes the partials of
// the changed shards (at most every publishEvery) and, once Kafka has
// them, their checkpoints and committed offsets.
func (in *instance) handle(ctx context.Context, cl *kgo.Client, dlq *streams.DeadLetter, fetches kgo.Fetches) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.err != nil {
		return in.err
	}
	now := time.Now()
	var dead []*kgo.Record
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		sh := in.shards[tp{fp.Topic, fp.Partition}]
		if sh == nil {
			return
		}
		sh.s.SetClock(now, in.cfg.MaxClockSkew)
		sh.s.SetEnd(fp.HighWatermark)
		sh.published, sh.fetched = false, true
		if len(fp.Records) > 0 {
			in.progress[tp{fp.Topic, fp.Partition}] = now
		}
		for _, rec := range fp.Records {
			out, reason, err := sh.s.Handle(rec)
			if err == nil {
				in.stats.count(fp.Topic == in.topics.Signals, out)
			}
			if err == nil && out == DeadLettered {
				dead = append(dead, dlq.Record(rec, reason))
				if code, detail, _ := cutReason(reason); registryCode(code) {
					in.alarm.note(now, keyOf(rec.Key), code, detail)
				}
			}
		}
	})
	in.releaseStalled(now)
	if len(dead) > 0 {
		if err := cl.ProduceSync(ctx, dead...).FirstErr(); err != nil {
			return fmt.Errorf("dead-lettering: %w", err)
		}
	}
	if now.Before(in.nextPublish) {
		return nil // the next poll ends by then (pollWait)
	}
	var pubs []publication
	for k, sh := range in.shards {
		if sh.published || !sh.fetched || !sh.s.Rebuilt() {
			continue
		}
		pub, err := in.publication(k, sh, sh.s.partial(), true)
		if err != nil {
			return err
		}
		pubs = append(pubs, pub)
	}
	if len(pubs) == 0 {
		return nil
	}
	if err := in.publish(ctx, cl, pubs); err != nil {
		return err
	}
	in.nextPublish = now.Add(in.publishEvery)
	offs := map[string]map[int32]kgo.EpochOffset{}
	for _, pub := range pubs {
		sh := pub.sh
		for _, m := range sh.s.Checkpoint().Partitions {
			if offs[m.Topic] == nil {
				offs[m.Topic] = map[int32]kgo.EpochOffset{}
			}
			offs[m.Topic][m.Partition] = kgo.EpochOffset{Epoch: -1, Offset: m.Resume}
		}
	}
	// Not waited for: during a rebalance, which waits for this poll to
	// end, a synchronous commit would wait for the rebalance. The
	// checkpoints hold the offsets; a new owner consuming from an older
	// committed offset only re-reads records it then treats as replayed.
	cl.CommitOffsets(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			in.log.Warn("committing group offsets", "err", err) // the checkpoints hold them
		}
	})
	return nil
}

// releaseStalled releases the owned partitions that have had unread
// records but delivered none for stalledAfter, as the single processor
// does (loop.go), and marks their partials for publishing. Only the
// owner releases a partition: one whose owner is gone holds the windows
// until a new owner reads it.
func (in *instance) releaseStalled(now time.Time) {
	for k, sh := range in.shards {
		if !sh.s.Pending() || !sh.s.Rebuilt() {
			delete(in.progress, k)
			continue
		}
		since, ok := in.progress[k]
		if !ok {
			in.progress[k] = now
			continue
		}
		if now.Sub(since) > in.stalledAfter {
			in.log.Warn("partition stalled; no longer holding the watermark", "topic", k.Topic, "partition", k.Partition)
			sh.s.Release()
			sh.published, sh.fetched = false, true
			delete(in.progress, k)
		}
	}
	for k := range in.progress {
		if in.shards[k] == nil {
			delete(in.progress, k)
		}
	}
}

// RunCombiner consumes the partials topic through cl (a direct consumer
// of PartialsTopic from its start, see CombinerClientOpts) and publishes
// the estimates of every window all input partitions have passed, then
// its clock. It runs until ctx is done.
func RunCombiner(ctx context.Context, cl *kgo.Client, cfg Config) error {
	cfg.defaults()
	topics := streams.TopicsFor(cfg.TopicPrefix)
	comb, err := newCombiner(cfg.Spec(), cfg.Fitter)
	if err != nil {
		return err
	}
	if err := ensurePartitionedTopics(ctx, cl, cfg); err != nil {
		return err
	}
	ckpt := &combinerCheckpoint{topic: CheckpointTopic(cfg.TopicPrefix), key: cfg.Group + "/combiner"}
	state, err := ckpt.read(ctx, cl, cfg.Logger)
	if err != nil {
		return err
	}
	if sane := sanitizeState(state, time.Now(), cfg.MaxClockSkew); sane.Next != state.Next || sane.Watermark != state.Watermark {
		cfg.Logger.Warn("combiner checkpoint's watermark is in the future; restarting the windows from the partials",
			"watermark_unix_ms", state.Watermark, "next_window_start_unix_ms", state.Next)
		state = sane
	}
	comb.RestoreState(state)
	ends, err := listOffsets(ctx, cl, kadm.NewClient(cl).ListEndOffsets, topics.Inputs())
	if err != nil {
		return fmt.Errorf("listing input partitions: %w", err)
	}
	ends.Each(func(o kadm.ListedOffset) { comb.Expect(o.Topic, o.Partition) })
	hdrs := streams.ProtoHeaders(&schemas.Estimate{})
	partials := newPartialReader()
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		var (
			perr error
			read []keyValue
		)
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Topic == PartialsTopic(cfg.TopicPrefix) {
				read = append(read, keyValue{string(r.Key), r.Value})
			}
		})
		// Partitions' partials decode in parallel; the combiner takes
		// them in log order.
		for _, res := range partials.addAll(read, runtime.GOMAXPROCS(0)) {
			if res.err != nil {
				perr = errors.Join(perr, res.err)
				continue
			}
			if res.ok {
				comb.Update(res.p)
			}
		}
		if perr != nil {
			cfg.Logger.Warn("undecodable partial", "err", perr)
		}
		// Fresh log ends: a partition whose partial is behind them holds
		// the watermark.
		ends, err := listOffsets(ctx, cl, kadm.NewClient(cl).ListEndOffsets, topics.Inputs())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			cfg.Logger.Warn("listing input ends", "err", err)
			continue
		}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				comb.SetEnd(o.Topic, o.Partition, o.Offset)
			}
		})
		comb.SetClock(time.Now())
		fired := comb.Fire()
		var recs []*kgo.Record
		for _, f := range fired {
			for _, e := range f.Estimates {
				v, err := estimate.Marshal(e)
				if err != nil {
					return err
				}
				recs = append(recs, &kgo.Record{Topic: topics.Estimates, Key: []byte(estimate.Key(e)), Value: v, Timestamp: time.UnixMilli(f.End), Headers: hdrs})
			}
		}
		// The checkpoint follows the estimates it covers: a combiner
		// stopped between the two fires those windows again after its
		// restart, with the same bytes (docs/processor.md).
		if len(recs) > 0 {
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				if ctx.Err() != nil {
					return nil // stopped: the restart publishes them again
				}
				return fmt.Errorf("publishing estimates: %w", err)
			}
		}
		// The state (clock and kept panes) is written when it changed.
		if err := ckpt.write(ctx, cl, comb.State()); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// combinerCheckpoint reads and writes the combiner's checkpoint: a JSON
// header under key and the chunks of its kept panes under
// key/<gen>/<i> (partitioned_codec.go), remembering what it last wrote.
type combinerCheckpoint struct {
	topic, key string
	hdr        []byte   // the header last written or read
	gen        uint64   // its chunks' generation (0: none)
	chunks     [][]byte // and their values
	keptRev    uint64   // the state's keptRev they encode (0: unknown)
}

// read returns the latest checkpoint (the zero state if none) and
// deletes chunks no header names (a combiner stopped between writing
// chunks and their header, or before deleting replaced ones).
func (c *combinerCheckpoint) read(ctx context.Context, cl *kgo.Client, log *slog.Logger) (combinerState, error) {
	vals, err := readLatest(ctx, cl, c.topic, c.key, func(k string, v []byte) bool {
		if k == c.key {
			_, _, _, err := combinerHeader(v)
			return err == nil
		}
		base, _, _, ok := parseChunkKey(k)
		return ok && base == c.key
	})
	if err != nil {
		return combinerState{}, err
	}
	var st combinerState
	if h, ok := vals[c.key]; ok {
		_, gen, n, err := combinerHeader(h)
		if err != nil {
			return combinerState{}, err
		}
		if st, err = decodeCombinerState(h, func(i int) ([]byte, bool) {
			v := vals[chunkKey(c.key, gen, i)]
			return v, len(v) > 0
		}); err != nil {
			return combinerState{}, fmt.Errorf("restoring the combiner's checkpoint: %w", err)
		}
		c.hdr, c.gen = h, gen
		for i := range n {
			c.chunks = append(c.chunks, vals[chunkKey(c.key, gen, i)])
		}
	}
	var stale []*kgo.Record
	for k, v := range vals {
		if _, gen, _, ok := parseChunkKey(k); ok && len(v) > 0 && (gen != c.gen || c.gen == 0) {
			stale = append(stale, &kgo.Record{Topic: c.topic, Key: []byte(k)})
		}
	}
	if len(stale) > 0 {
		log.Info("deleting chunks of an unfinished combiner checkpoint", "chunks", len(stale))
		if err := cl.ProduceSync(ctx, stale...).FirstErr(); err != nil {
			return combinerState{}, fmt.Errorf("deleting stale checkpoint chunks: %w", err)
		}
	}
	return st, nil
}

// write writes st if it differs from the checkpoint last written: new
// chunks (when the kept panes changed), then, once Kafka has them, the
// header naming them, then tombstones for the chunks they replace.
func (c *combinerCheckpoint) write(ctx context.Context, cl *kgo.Client, st combinerState) error {
	chunks, changed := c.keptChunks(st)
	gen := c.gen
	if changed {
		gen = 0
		if len(chunks) > 0 {
			gen = newGen()
		}
	}
	hdr, err := combinerStateHeader(st, gen, len(chunks))
	if err != nil {
		return err
	}
	if !changed && bytes.Equal(hdr, c.hdr) {
		c.wrote(st, chunks)
		return nil
	}
	if changed && len(chunks) > 0 {
		recs := make([]*kgo.Record, len(chunks))
		for i, v := range chunks {
			recs[i] = &kgo.Record{Topic: c.topic, Key: []byte(chunkKey(c.key, gen, i)), Value: v,
				Headers: streams.Headers(partialContentType, CheckpointMessage+"Chunk")}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("writing combiner checkpoint: %w", err)
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: c.topic, Key: []byte(c.key), Value: hdr,
		Headers: streams.Headers(schemas.ContentTypeJSON, CheckpointMessage)}).FirstErr(); err != nil {
		return fmt.Errorf("writing combiner checkpoint: %w", err)
	}
	if changed && c.gen != 0 {
		recs := make([]*kgo.Record, len(c.chunks))
		for i := range c.chunks {
			recs[i] = &kgo.Record{Topic: c.topic, Key: []byte(chunkKey(c.key, c.gen, i))}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("deleting replaced checkpoint chunks: %w", err)
		}
	}
	c.hdr, c.gen = hdr, gen
	c.wrote(st, chunks)
	return nil
}

// keptChunks returns the chunks of st's kept panes and whether they
// differ from the last written: when the combiner has not changed its
// kept panes since (keptRev), the last written, without encoding them
// (they are the whole of a lagging partition's panes, and the combiner
// writes its checkpoint after every poll).
func (c *combinerCheckpoint) keptChunks(st combinerState) (chunks [][]byte, changed bool) {
	if st.keptRev != 0 && st.keptRev == c.keptRev {
		return c.chunks, false
	}
	chunks = encodeChunks(st.Kept, chunkBytes)
	return chunks, !slices.EqualFunc(chunks, c.chunks, bytes.Equal)
}

// wrote records chunks, of st's kept panes, as written.
func (c *combinerCheckpoint) wrote(st combinerState, chunks [][]byte) {
	c.chunks, c.keptRev = chunks, st.keptRev
}

// CombinerClientOpts are the options of RunCombiner's client.
func CombinerClientOpts(cfg Config) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumeTopics(PartialsTopic(cfg.TopicPrefix)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.GzipCompression()), // read by every client without plugins (docs/topics.md)
	}
}

// ensurePartitionedTopics creates the inputs and outputs (EnsureTopics)
// and the compacted checkpoint and partials topics when missing, all with
// cfg.Replication.
func ensurePartitionedTopics(ctx context.Context, cl *kgo.Client, cfg Config) error {
	if err := streams.EnsureTopics(ctx, cl, streams.TopicsFor(cfg.TopicPrefix), cfg.Partitions, cfg.Replication); err != nil {
		return err
	}
	compact := "compact"
	for _, t := range []string{CheckpointTopic(cfg.TopicPrefix), PartialsTopic(cfg.TopicPrefix)} {
		if err := streams.CreateTopic(ctx, cl, t, 1, map[string]*string{"cleanup.policy": &compact}, cfg.Replication); err != nil {
			return err
		}
	}
	return nil
}

// readCheckpoints returns the latest checkpoint of every key with the
// prefix, in one pass over the checkpoint topic (see readCheckpoint); a
// latest value that does not decode is skipped, as readCheckpoint skips
// it.
func readCheckpoints(ctx context.Context, cl *kgo.Client, topic, prefix string) (map[string]shardCheckpoint, error) {
	out := map[string]shardCheckpoint{}
	_, err := readLatest(ctx, cl, topic, prefix, func(k string, v []byte) bool {
		var c shardCheckpoint
		if json.Unmarshal(v, &c) != nil {
			return false
		}
		out[k] = c
		return true
	})
	return out, err
}

// readLatest returns the latest value of every key with the prefix in
// the checkpoint topic that valid accepts (valid nil: any), in one pass:
// as readCheckpoint, a value that is not valid (anyone who can produce
// to the topic can write it) leaves the key's previous value in place.
func readLatest(ctx context.Context, cl *kgo.Client, topic, prefix string, valid func(key string, value []byte) bool) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := scanLog(ctx, cl, topic, func(rec *kgo.Record) {
		if !strings.HasPrefix(string(rec.Key), prefix) {
			return
		}
		if valid != nil && !valid(string(rec.Key), rec.Value) {
			return
		}
		out[string(rec.Key)] = rec.Value
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scanLog hands each record of the one-partition topic, from its start
// to its end as listed now, to fn, in order.
func scanLog(ctx context.Context, cl *kgo.Client, topic string, fn func(*kgo.Record)) error {
	lg, err := checkpointLog(ctx, cl, topic)
	if err != nil || lg.end <= 0 {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for off := lg.start; off < lg.end; {
		recs, err := lg.fetch(rctx, cl, off)
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			break
		}
		for _, rec := range recs {
			off = rec.Offset + 1
			if rec.Offset < lg.end {
				fn(rec)
			}
		}
	}
	return nil
}

// partialGen is the generation and chunk count a partition's latest
// header names (zero: no header, or a one-record JSON partial).
type partialGen struct {
	gen    uint64
	chunks int
}

// deleteOrphans reads the partials topic once and, for each header key
// in bases (the partialKey of partitions being taken over), finds the
// generation its latest header names, the one a combiner reading the
// compacted topic uses, and deletes (tombstones) every live chunk of any
// other generation: chunks a previous owner wrote before it was killed
// and before their header, or that a header replaced before it deleted
// them. It returns the latest headers' generations. As partialReader, a
// header that does not decode leaves the previous one in force.
func deleteOrphans(ctx context.Context, cl *kgo.Client, topic string, bases map[string]bool, log *slog.Logger) (map[string]partialGen, error) {
	cur := map[string]partialGen{}
	live := map[string]bool{}
	err := scanLog(ctx, cl, topic, func(rec *kgo.Record) {
		key := string(rec.Key)
		if base, _, _, ok := parseChunkKey(key); ok {
			if bases[base] {
				live[key] = len(rec.Value) > 0
			}
			return
		}
		if !bases[key] {
			return
		}
		if len(rec.Value) == 0 {
			delete(cur, key) // compaction removes the header
			return
		}
		h, err := decodeHeader(rec.Value)
		if err != nil || partialKey(tp{h.Topic, h.Partition}) != key {
			return
		}
		cur[key] = partialGen{gen: h.gen, chunks: h.chunks}
	})
	if err != nil {
		return nil, fmt.Errorf("reading the partials' chunks: %w", err)
	}
	var tombs []*kgo.Record
	for key, ok := range live {
		base, gen, i, _ := parseChunkKey(key)
		if c := cur[base]; ok && (gen != c.gen || i >= c.chunks) {
			tombs = append(tombs, &kgo.Record{Topic: topic, Key: []byte(key)})
		}
	}
	if len(tombs) == 0 {
		return cur, nil
	}
	slices.SortFunc(tombs, func(a, b *kgo.Record) int { return bytes.Compare(a.Key, b.Key) })
	log.Info("deleting orphaned partial chunks", "chunks", len(tombs))
	if err := cl.ProduceSync(ctx, tombs...).FirstErr(); err != nil {
		return nil, fmt.Errorf("deleting orphaned partial chunks: %w", err)
	}
	return cur, nil
}
