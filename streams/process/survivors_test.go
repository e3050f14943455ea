package process

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// Behaviours whose one-line mutants survived the package's other tests
// (bench/mutation, docs/testing.md "Survivors"), each pinned by a test
// named for it.

// demandEstimates returns n demand estimates of distinct clusters.
func demandEstimates(n int) []*schemas.Estimate {
	out := make([]*schemas.Estimate, n)
	for i := range out {
		out[i] = &schemas.Estimate{Kind: &schemas.Estimate_Demand{Demand: &schemas.DemandEstimate{
			SchemaVersion: 1, Cluster: fmt.Sprintf("c%04d", i), WindowStartUnixMs: 1000, WindowEndUnixMs: 31000 + int64(i),
		}}}
	}
	return out
}

// TestMarshalAllEncodesEveryEstimateWhateverTheChunking: a window's
// estimates are split into chunks of at least 256, one encoder each;
// every estimate gets its key and its Marshal bytes, also when the count
// is a whole number of chunks (no chunk past the end, which has no
// encoder) and when several chunks each take their own encoder.
func TestMarshalAllEncodesEveryEstimateWhateverTheChunking(t *testing.T) {
	for _, c := range []struct{ n, encs int }{{0, 1}, {1, 1}, {256, 1}, {512, 2}, {600, 2}, {1000, 3}, {300, 4}} {
		t.Run(fmt.Sprintf("%d_estimates_%d_encoders", c.n, c.encs), func(t *testing.T) {
			ests := demandEstimates(c.n)
			encs := make([]*estimate.Encoder, c.encs)
			for i := range encs {
				encs[i] = &estimate.Encoder{}
			}
			keys, vals, err := marshalAll(ests, encs)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != c.n || len(vals) != c.n {
				t.Fatalf("%d keys, %d values for %d estimates", len(keys), len(vals), c.n)
			}
			for i, e := range ests {
				want, err := estimate.Marshal(e)
				if err != nil {
					t.Fatal(err)
				}
				if string(keys[i]) != estimate.Key(e) || !bytes.Equal(vals[i], want) {
					t.Fatalf("estimate %d: key %q value %x, want %q %x", i, keys[i], vals[i], estimate.Key(e), want)
				}
			}
		})
	}
}

// TestJSONPartialDecodesWithItsPanes: a partial written as one JSON
// record (before chunking) still decodes, with its topic, partition,
// event time, offsets, flags and panes, and needs no chunk.
func TestJSONPartialDecodesWithItsPanes(t *testing.T) {
	b, err := json.Marshal(wirePartial{Topic: "sw.signals", Partition: 2, MaxT: 31_000, Next: 17, Seen: true, Pending: true,
		Panes: map[int64][]byte{30_000: estimate.AppendPane(nil, estimate.NewPane())}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := decodePartial(b, func(int) ([]byte, bool) { return nil, false })
	if err != nil {
		t.Fatal(err)
	}
	if p.Topic != "sw.signals" || p.Partition != 2 || p.MaxT != 31_000 || p.Next != 17 || !p.Seen || !p.Pending {
		t.Errorf("decoded %s/%d max_t %d next %d seen %v pending %v, want sw.signals/2 31000 17 true true",
			p.Topic, p.Partition, p.MaxT, p.Next, p.Seen, p.Pending)
	}
	if len(p.Panes) != 1 || p.Panes[30_000] == nil {
		t.Errorf("panes %v, want the one at 30000", p.Panes)
	}
}

// TestConfiguredPartitionCountCreatesTopics: the input topics are
// created with Config.Partitions partitions; only an unset (or negative)
// count takes the default, 3.
func TestConfiguredPartitionCountCreatesTopics(t *testing.T) {
	kc := testenv.Kafka(t)
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for prefix, c := range map[string]struct{ set, want int32 }{"five": {5, 5}, "unset": {0, 3}, "negative": {-1, 3}} {
		cfg := partitionedConfig(prefix)
		cfg.Partitions = c.set
		in, err := newPartitioned(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := ensurePartitionedTopics(ctx, cl, in.cfg); err != nil {
			t.Fatal(err)
		}
		topics := streams.TopicsFor(prefix)
		details, err := kadm.NewClient(cl).ListTopics(ctx, topics.Signals, topics.RoutingEvents)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{topics.Signals, topics.RoutingEvents} {
			if d := details[name]; d.Err != nil || int32(len(d.Partitions)) != c.want {
				t.Errorf("Partitions %d: topic %s has %d partitions (%v), want %d", c.set, name, len(d.Partitions), d.Err, c.want)
			}
		}
	}
}

// TestDeadLetterReasonSplitsCodeFromDetail: a dead-letter reason
// "code: detail" is counted and alarmed by its code, with the detail
// apart; a reason without ": " is all code.
func TestDeadLetterReasonSplitsCodeFromDetail(t *testing.T) {
	for _, c := range []struct{ reason, code, detail string }{
		{"unknown_engine: engine e9 not in the registry", "unknown_engine", "engine e9 not in the registry"},
		{"bad_json: a: b", "bad_json", "a: b"},
		{"x: ", "x", ""},
		{": detail", "", "detail"},
		{"malformed", "malformed", ""},
		{"no:space", "no:space", ""},
	} {
		code, detail, _ := cutReason(c.reason)
		if code != c.code || detail != c.detail {
			t.Errorf("cutReason(%q) = %q, %q; want %q, %q", c.reason, code, detail, c.code, c.detail)
		}
	}
}

// oneRecordFetch is a poll that delivered rec alone from its partition,
// whose log ends at end.
func oneRecordFetch(rec *kgo.Record, end int64) kgo.Fetches {
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: rec.Topic, Partitions: []kgo.FetchPartition{
		{Partition: rec.Partition, HighWatermark: end, Records: []*kgo.Record{rec}},
	}}}}}
}

// holds reports whether k is among core's partitions with unread
// records (those that hold the watermark).
func holds(core *Core, k tp) bool {
	return slices.Contains(core.pending(), k)
}

// TestPartitionDeliveringOneRecordPerPollIsNotStalled: the single
// processor releases a partition with unread records only once it has
// delivered nothing for stalledAfter; a partition that delivers a
// record every poll, one at a time, keeps holding the watermark however
// long its backlog lasts.
func TestPartitionDeliveringOneRecordPerPollIsNotStalled(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("onebyone")
	ensure(t, kc, topics)
	cfg := config("onebyone")
	p, _ := newProcessor(t, kc, cfg)
	core := newTestCore(t, topics, cfg.Spec())
	r := newRunner(p, core)
	k := tp{topics.RoutingEvents, 0}
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	for i := range 8 { // a poll every 20 s, 140 s in all: past stalledAfter (30 s) many times
		now := start.Add(time.Duration(i) * 20 * time.Second)
		r.handleFetches(oneRecordFetch(routingRec(topics, 0, int64(i), now.Add(-time.Second), i), 1000), now)
		if !holds(core, k) {
			t.Fatalf("poll %d (%v after the first): the partition delivering a record each poll was released as stalled", i, now.Sub(start))
		}
	}
	// The rule itself: with no record for longer than stalledAfter, the
	// partition is released.
	now := start.Add(7*20*time.Second + stalledAfter + time.Second)
	r.handleFetches(nil, now)
	if holds(core, k) {
		t.Fatalf("a partition that delivered nothing for %v still holds the watermark", now.Sub(start.Add(7*20*time.Second)))
	}
}

// stallingInstance is a partitioned instance for topics named for name
// that counts a partition stalled after 20 ms and publishes nothing (no
// client needed), and own, which gives it a new shard of partition k.
func stallingInstance(t *testing.T, name string) (*instance, func(k tp) *shard) {
	t.Helper()
	cfg := partitionedConfig(name)
	in, err := newPartitioned(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in.stalledAfter = 20 * time.Millisecond
	in.nextPublish = time.Now().Add(time.Hour)
	own := func(k tp) *shard {
		s, err := newShard(in.topics, cfg.Spec(), k.Topic, k.Partition)
		if err != nil {
			t.Fatal(err)
		}
		in.shards[k] = &instShard{s: s, fetched: true}
		return s
	}
	return in, own
}

// TestInstancePartitionDeliveringRecordsIsNotStalled: an instance
// releases an owned partition with unread records only once it has
// delivered nothing for stalledAfter; one that delivers records every
// poll keeps holding the watermark for longer than that.
func TestInstancePartitionDeliveringRecordsIsNotStalled(t *testing.T) {
	in, own := stallingInstance(t, "delivering")
	topics := in.topics
	k := tp{topics.RoutingEvents, 1}
	s := own(k)
	start := time.Now()
	for i := 0; time.Since(start) < 5*in.stalledAfter; i++ { // records flow for 5x stalledAfter
		rec := routingRec(topics, k.Partition, int64(i), time.Now().Add(-time.Second), i)
		if err := in.handle(context.Background(), nil, nil, oneRecordFetch(rec, 1_000_000)); err != nil {
			t.Fatal(err)
		}
		if !s.Pending() {
			t.Fatalf("record %d, %v after the first: the partition delivering records was released as stalled", i, time.Since(start))
		}
	}
}

// TestRevokedPublishedPartitionHandedOverAsPending: when the group takes
// away a partition whose partial is already published, the instance
// writes its header again, marked pending, naming the same chunks: the
// next owner restores those panes, and the combiner's watermark waits for
// that owner instead of passing the partition while nobody reads it.
func TestRevokedPublishedPartitionHandedOverAsPending(t *testing.T) {
	kc := testenv.Kafka(t)
	cfg := partitionedConfig("handover")
	in, err := newPartitioned(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ensurePartitionedTopics(ctx, cl, in.cfg); err != nil {
		t.Fatal(err)
	}
	k := tp{in.topics.RoutingEvents, 1}
	s, err := newShard(in.topics, cfg.Spec(), k.Topic, k.Partition)
	if err != nil {
		t.Fatal(err)
	}
	s.SetEnd(1)
	if _, _, err := s.Handle(routingRec(in.topics, k.Partition, 0, time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC), 0)); err != nil {
		t.Fatal(err)
	}
	const gen, chunks = 0x1234, 2
	in.shards[k] = &instShard{s: s, fetched: true, published: true, gen: gen, chunks: chunks}
	in.revoked(ctx, cl, map[string][]int32{k.Topic: {k.Partition}})

	rd := testenv.Client(t, kc, kgo.ConsumeTopics(PartialsTopic(cfg.TopicPrefix)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []*kgo.Record
	for ctx.Err() == nil && len(got) == 0 {
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		got = append(got, rd.PollFetches(pctx).Records()...)
		pcancel()
	}
	if len(got) != 1 {
		t.Fatalf("%d records on the partials topic after the revocation, want the one header", len(got))
	}
	if string(got[0].Key) != partialKey(k) {
		t.Fatalf("header key %q, want %q", got[0].Key, partialKey(k))
	}
	h, err := decodeHeader(got[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Pending || h.gen != gen || h.chunks != chunks || h.Topic != k.Topic || h.Partition != k.Partition || h.Next != 1 {
		t.Errorf("handover header %s/%d next %d pending %v gen %#x chunks %d; want %s/%d next 1 pending true gen %#x chunks %d",
			h.Topic, h.Partition, h.Next, h.Pending, h.gen, h.chunks, k.Topic, k.Partition, gen, chunks)
	}
	if in.shards[k] != nil {
		t.Error("the revoked partition's shard is kept")
	}
}

// TestCommandDefaultsAreTheConfigDefaults: the commands' flag defaults
// (DefaultGroup, DefaultWindow, DefaultSlide, DefaultAllowedLateness)
// are a valid configuration, the same as a zero Config's (the single
// processor, the instances and the combiner must agree on them).
func TestCommandDefaultsAreTheConfigDefaults(t *testing.T) {
	flags := Config{Group: DefaultGroup, Window: DefaultWindow, Slide: DefaultSlide, AllowedLateness: DefaultAllowedLateness}
	if err := flags.Validate(); err != nil {
		t.Fatalf("the flag defaults: %v", err)
	}
	started := time.Unix(1_800_000_000, 0)
	got, want := flags.Settings(started), Config{}.Settings(started)
	if got.Instance != want.Instance || *got.Processor != *want.Processor {
		t.Errorf("flag defaults give %s %+v, a zero Config %s %+v", got.Instance, *got.Processor, want.Instance, *want.Processor)
	}
}

// TestInstancePartitionInPollsWithoutRecordsIsStalled: a partition that
// comes in every poll with no record of its own (a fetch keeps its empty
// partitions beside the others') delivers nothing: once it has had
// unread records and no record for stalledAfter it is released, while
// its neighbour keeps delivering.
func TestInstancePartitionInPollsWithoutRecordsIsStalled(t *testing.T) {
	in, own := stallingInstance(t, "emptypolls")
	topics := in.topics
	idle, busy := tp{topics.RoutingEvents, 1}, tp{topics.RoutingEvents, 2}
	sIdle := own(idle)
	own(busy)
	if err := in.handle(context.Background(), nil, nil, oneRecordFetch(routingRec(topics, idle.Partition, 0, time.Now().Add(-time.Second), 0), 1_000_000)); err != nil {
		t.Fatal(err)
	}
	if !sIdle.Pending() {
		t.Fatal("the idle partition has no unread records after its first")
	}
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; sIdle.Pending() && time.Now().Before(deadline); i++ {
		fetch := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: topics.RoutingEvents, Partitions: []kgo.FetchPartition{
			{Partition: idle.Partition, HighWatermark: 1_000_000},
			{Partition: busy.Partition, HighWatermark: 1_000_000, Records: []*kgo.Record{routingRec(topics, busy.Partition, int64(i), time.Now().Add(-time.Second), i)}},
		}}}}}
		if err := in.handle(context.Background(), nil, nil, fetch); err != nil {
			t.Fatal(err)
		}
	}
	if sIdle.Pending() {
		t.Fatal("a partition in every poll with no records of its own was never released as stalled")
	}
}
