package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
// input partition's Partial on in, keyed "<topic>/<partition>".
func PartialsTopic(prefix string) string {
	if prefix == "" {
		prefix = streams.DefaultPrefix
	}
	return prefix + ".processor.partials"
}

// wirePartial is a Partial as JSON; panes are estimate.AppendPane bytes.
type wirePartial struct {
	Topic     string           `json:"topic"`
	Partition int32            `json:"partition"`
	MaxT      int64            `json:"max_t"`
	Next      int64            `json:"next_offset"`
	Seen      bool             `json:"seen"`
	Pending   bool             `json:"pending"`
	Panes     map[int64][]byte `json:"panes"`
}

func encodePartial(p Partial) ([]byte, error) {
	w := wirePartial{Topic: p.Topic, Partition: p.Partition, MaxT: p.MaxT, Next: p.Next, Seen: p.Seen, Pending: p.Pending, Panes: appendPanes(p.Panes)}
	return json.Marshal(w)
}

func decodePartial(b []byte) (Partial, error) {
	var w wirePartial
	if err := json.Unmarshal(b, &w); err != nil {
		return Partial{}, fmt.Errorf("decoding partial: %w", err)
	}
	panes, err := decodePanes(w)
	if err != nil {
		return Partial{}, fmt.Errorf("decoding partial: %w", err)
	}
	return Partial{Topic: w.Topic, Partition: w.Partition, MaxT: w.MaxT, Next: w.Next, Seen: w.Seen, Pending: w.Pending, Panes: panes}, nil
}

// appendPanes encodes panes by start.
func appendPanes(panes map[int64]*estimate.Pane) map[int64][]byte {
	out := make(map[int64][]byte, len(panes))
	for st, pane := range panes {
		out[st] = estimate.AppendPane(nil, pane)
	}
	return out
}

// decodePanes decodes the panes of w.
func decodePanes(w wirePartial) (map[int64]*estimate.Pane, error) {
	out := make(map[int64]*estimate.Pane, len(w.Panes))
	for st, b := range w.Panes {
		pane, err := estimate.DecodePane(b)
		if err != nil {
			return nil, fmt.Errorf("pane %d of %s/%d: %w", st, w.Topic, w.Partition, err)
		}
		out[st] = pane
	}
	return out, nil
}

// wireCombinerState is a CombinerState as JSON: the Checkpoint fields
// (which readCheckpoint reads too) plus the kept panes, as partials
// holding only panes.
type wireCombinerState struct {
	Checkpoint
	Kept []wirePartial `json:"kept,omitempty"`
}

func encodeCombinerState(st CombinerState) ([]byte, error) {
	w := wireCombinerState{Checkpoint: Checkpoint{Version: 1, Watermark: st.Watermark, Next: st.Next}}
	for _, p := range st.Kept {
		w.Kept = append(w.Kept, wirePartial{Topic: p.Topic, Partition: p.Partition, Panes: appendPanes(p.Panes)})
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encoding combiner state: %w", err)
	}
	return b, nil
}

func decodeCombinerState(b []byte) (CombinerState, error) {
	var w wireCombinerState
	if err := json.Unmarshal(b, &w); err != nil {
		return CombinerState{}, fmt.Errorf("decoding combiner state: %w", err)
	}
	st := CombinerState{Watermark: w.Watermark, Next: w.Next}
	for _, wp := range w.Kept {
		panes, err := decodePanes(wp)
		if err != nil {
			return CombinerState{}, fmt.Errorf("decoding combiner state: %w", err)
		}
		st.Kept = append(st.Kept, Partial{Topic: wp.Topic, Partition: wp.Partition, Panes: panes})
	}
	return st, nil
}

// sanitizeState drops the window clock of a combiner state dated beyond
// now plus maxSkew (negative: no limit), as the single processor drops
// such a checkpoint's (recovery.go): restored, it would fire windows
// before their records are in.
func sanitizeState(st CombinerState, now time.Time, maxSkew time.Duration) CombinerState {
	if maxSkew < 0 {
		return st
	}
	if lim := now.Add(maxSkew).UnixMilli(); st.Watermark > lim || st.Next > lim {
		st.Watermark, st.Next = 0, 0
	}
	return st
}

// Instance is one member of partitioned processing: it runs the Shard of
// every input partition the consumer group assigns it and publishes the
// shards' partials and per-partition checkpoints; a Combiner (RunCombiner)
// turns the partials into estimates. Create its client with
// inst.ClientOpts().
type Instance struct {
	cfg    Config
	topics streams.Topics
	log    *slog.Logger

	mu     sync.Mutex
	cl     *kgo.Client
	shards map[tp]*instShard
	err    error // from a callback
	// killed (a test hook) makes the instance stop as if killed: no
	// hand-over, no leaving the group.
	killed bool
	// stalledAfter: an owned partition with unread records that
	// delivers none for this long is released (Shard.Release); the
	// single processor's stalledAfter, shorter in tests. Polls end at
	// least every stalledAfter/4 so that the rule applies while no
	// partition delivers anything.
	stalledAfter time.Duration
	// progress is when each pending partition last delivered records
	// (or became pending).
	progress map[tp]time.Time
}

type instShard struct {
	s         *Shard
	fetched   bool // a fetch of the partition was handled
	published bool // a partial was published since the last change
}

// NewInstance returns an instance for cfg.
func NewInstance(cfg Config) (*Instance, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("processor config: %w", err)
	}
	return &Instance{cfg: cfg, topics: streams.TopicsFor(cfg.TopicPrefix), log: cfg.Logger, shards: map[tp]*instShard{},
		stalledAfter: stalledAfter, progress: map[tp]time.Time{}}, nil
}

// ClientOpts are ClientOpts(cfg) plus the cooperative-sticky balancer,
// rebalances held while a poll is handled, and the instance's assignment
// callbacks.
func (in *Instance) ClientOpts() []kgo.Opt {
	return append(ClientOpts(in.cfg),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(in.assigned),
		kgo.OnPartitionsRevoked(in.revoked),
		kgo.OnPartitionsLost(in.lost),
	)
}

func ckptKey(group string, k tp) string {
	return group + "/" + k.Topic + "/" + strconv.Itoa(int(k.Partition))
}

// assigned creates the shards of newly assigned partitions from their
// checkpoints; consumption starts at the group's committed offset, which
// is the checkpoint's resume offset (committed after it).
func (in *Instance) assigned(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
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
	var recs []*kgo.Record
	for topic, ps := range parts {
		for _, part := range ps {
			k := tp{topic, part}
			s, err := NewShard(in.topics, in.cfg.Spec(), topic, part)
			if err != nil {
				in.fail(err)
				return
			}
			cp, found := cps[ckptKey(in.cfg.Group, k)]
			if found {
				s.Restore(cp)
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
			sh := &instShard{s: s, fetched: true}
			in.shards[k] = sh
			// Nothing to re-read: the partial stands for the partition
			// now, even if no record comes.
			if s.Rebuilt() {
				rec, err := in.partialRecord(s.Partial())
				if err != nil {
					in.fail(err)
					return
				}
				recs = append(recs, rec)
				sh.published = true
			}
		}
	}
	if len(recs) > 0 {
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			in.fail(fmt.Errorf("publishing partials: %w", err))
		}
	}
}

// fail records the first error of a callback; Run returns it.
func (in *Instance) fail(err error) {
	if in.err == nil {
		in.err = err
	}
}

// revoked hands revoked partitions over: their partials and checkpoints
// are published after every poll, before rebalances are allowed, so the
// next owner restores what this one had; one last partial marks each as
// having unread records, so that the combiner's watermark waits for the
// next owner instead of passing the partition while it has none.
func (in *Instance) revoked(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
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
			p := sh.s.Partial()
			p.Pending = true
			rec, err := in.partialRecord(p)
			if err != nil {
				in.log.Warn("handing over", "topic", topic, "partition", part, "err", err)
				continue
			}
			recs = append(recs, rec)
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
func (in *Instance) lost(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.log.Warn("partitions lost", "partitions", fmt.Sprint(parts))
	for topic, ps := range parts {
		for _, part := range ps {
			delete(in.shards, tp{topic, part})
		}
	}
}

func (in *Instance) partialRecord(p Partial) (*kgo.Record, error) {
	v, err := encodePartial(p)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: PartialsTopic(in.cfg.TopicPrefix), Key: []byte(p.Topic + "/" + strconv.Itoa(int(p.Partition))), Value: v,
		Headers: streams.Headers(schemas.ContentTypeJSON, schemas.Package+".Partial")}, nil
}

// Owned is the number of input partitions the instance processes now.
func (in *Instance) Owned() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.shards)
}

// Run consumes through cl (created with ClientOpts) until ctx is done.
func (in *Instance) Run(ctx context.Context, cl *kgo.Client) error {
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
		pctx, cancel := context.WithTimeout(ctx, in.stalledAfter/4)
		fetches := cl.PollRecords(pctx, 10000)
		cancel()
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		err := in.handle(ctx, cl, dlq, fetches)
		cl.AllowRebalance()
		if err != nil {
			return err
		}
	}
}

// handle folds one poll into the shards, then publishes the partials of
// the changed shards and, once Kafka has them, their checkpoints and
// committed offsets.
func (in *Instance) handle(ctx context.Context, cl *kgo.Client, dlq *streams.DeadLetter, fetches kgo.Fetches) error {
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
			if err == nil && out == DeadLettered {
				dead = append(dead, dlq.Record(rec, reason))
			}
		}
	})
	in.releaseStalled(now)
	if len(dead) > 0 {
		if err := cl.ProduceSync(ctx, dead...).FirstErr(); err != nil {
			return fmt.Errorf("dead-lettering: %w", err)
		}
	}
	var partials, ckpts []*kgo.Record
	var changed []*instShard
	for k, sh := range in.shards {
		if sh.published || !sh.fetched || !sh.s.Rebuilt() {
			continue
		}
		rec, err := in.partialRecord(sh.s.Partial())
		if err != nil {
			return err
		}
		partials = append(partials, rec)
		cv, err := json.Marshal(sh.s.Checkpoint())
		if err != nil {
			return fmt.Errorf("encoding checkpoint: %w", err)
		}
		ckpts = append(ckpts, &kgo.Record{Topic: CheckpointTopic(in.cfg.TopicPrefix), Key: []byte(ckptKey(in.cfg.Group, k)), Value: cv,
			Headers: streams.Headers(schemas.ContentTypeJSON, CheckpointMessage)})
		changed = append(changed, sh)
	}
	if len(partials) == 0 {
		return nil
	}
	if err := cl.ProduceSync(ctx, partials...).FirstErr(); err != nil {
		return fmt.Errorf("publishing partials: %w", err)
	}
	if err := cl.ProduceSync(ctx, ckpts...).FirstErr(); err != nil {
		return fmt.Errorf("writing checkpoints: %w", err)
	}
	offs := map[string]map[int32]kgo.EpochOffset{}
	for _, sh := range changed {
		sh.published = true
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
func (in *Instance) releaseStalled(now time.Time) {
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
	comb, err := NewCombiner(cfg.Spec(), cfg.Fitter)
	if err != nil {
		return err
	}
	if err := ensurePartitionedTopics(ctx, cl, cfg); err != nil {
		return err
	}
	key := cfg.Group + "/combiner"
	var (
		state   CombinerState
		written []byte // the state last written
	)
	if _, err := readLatest(ctx, cl, CheckpointTopic(cfg.TopicPrefix), key, func(k string, v []byte) bool {
		st, err := decodeCombinerState(v)
		if k != key || err != nil {
			return false
		}
		state, written = st, v
		return true
	}); err != nil {
		return err
	}
	if sane := sanitizeState(state, time.Now(), cfg.MaxClockSkew); sane.Next != state.Next || sane.Watermark != state.Watermark {
		cfg.Logger.Warn("combiner checkpoint's watermark is in the future; restarting the windows from the partials",
			"watermark_unix_ms", state.Watermark, "next_window_start_unix_ms", state.Next)
		state = sane
	}
	comb.RestoreState(state)
	ends, err := listOffsets(ctx, cl, kadm.NewClient(cl).ListEndOffsets, []string{topics.Signals, topics.RoutingEvents})
	if err != nil {
		return fmt.Errorf("listing input partitions: %w", err)
	}
	ends.Each(func(o kadm.ListedOffset) { comb.Expect(o.Topic, o.Partition) })
	hdrs := streams.ProtoHeaders(&schemas.Estimate{})
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		var perr error
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Topic != PartialsTopic(cfg.TopicPrefix) {
				return
			}
			p, err := decodePartial(r.Value)
			if err != nil {
				perr = errors.Join(perr, err)
				return
			}
			comb.Update(p)
		})
		if perr != nil {
			cfg.Logger.Warn("undecodable partial", "err", perr)
		}
		// Fresh log ends: a partition whose partial is behind them holds
		// the watermark.
		ends, err := listOffsets(ctx, cl, kadm.NewClient(cl).ListEndOffsets, []string{topics.Signals, topics.RoutingEvents})
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
		v, err := encodeCombinerState(comb.State())
		if err != nil {
			return err
		}
		if bytes.Equal(v, written) {
			continue
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: CheckpointTopic(cfg.TopicPrefix), Key: []byte(key), Value: v,
			Headers: streams.Headers(schemas.ContentTypeJSON, CheckpointMessage)}).FirstErr(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("writing combiner checkpoint: %w", err)
		}
		written = v
	}
}

// CombinerClientOpts are the options of RunCombiner's client.
func CombinerClientOpts(cfg Config) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumeTopics(PartialsTopic(cfg.TopicPrefix)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
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
func readCheckpoints(ctx context.Context, cl *kgo.Client, topic, prefix string) (map[string]Checkpoint, error) {
	out := map[string]Checkpoint{}
	_, err := readLatest(ctx, cl, topic, prefix, func(k string, v []byte) bool {
		var c Checkpoint
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
	lg, err := checkpointLog(ctx, cl, topic)
	if err != nil || lg.end <= 0 {
		return out, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for off := lg.start; off < lg.end; {
		recs, err := lg.fetch(rctx, cl, off)
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			break
		}
		for _, rec := range recs {
			off = rec.Offset + 1
			if rec.Offset >= lg.end || !strings.HasPrefix(string(rec.Key), prefix) {
				continue
			}
			if valid != nil && !valid(string(rec.Key), rec.Value) {
				continue
			}
			out[string(rec.Key)] = rec.Value
		}
	}
	return out, nil
}
