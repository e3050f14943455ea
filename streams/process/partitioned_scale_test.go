package process

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
)

// scaleEngines is the engines on the one signals partition of
// TestInstanceThousandsOfEngines: their partials are several MB, far
// over Kafka's default 1 MB record limit.
const scaleEngines = 2_000

// scaleRecords are 30 s of signals from scaleEngines engines (each every
// 2 s), all on signals partition 0, and routing events of three clusters
// to some of them on routing partition 0; the other partitions are idle.
func scaleRecords(topics streams.Topics) []*kgo.Record {
	from := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	offs := map[string]int64{}
	var recs []*kgo.Record
	add := func(topic string, v []byte, at time.Time) {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Offset: offs[topic], Value: v, Timestamp: at})
		offs[topic]++
	}
	i := 0
	for d := time.Duration(0); d < 30*time.Second; d += 100 * time.Millisecond {
		at := from.Add(d)
		// Engine e signals at d ≡ e·1 ms (mod 2 s), in 100 ms batches.
		for e := int(d/(100*time.Millisecond)) % 20; e < scaleEngines; e += 20 {
			u := float64((int(d/time.Second) + 3*e) % 50)
			add(topics.Signals, mustMarshal(signal(fmt.Sprintf("r%03d-h100-%04d", e%100, e), []string{"h100", "a100", "l4"}[e%3], at, u, 5+u/5)), at)
		}
		for c := range 3 {
			ev := routing([]string{"us", "eu", "ap"}[c], fmt.Sprintf("r%03d-h100-%04d", (i*7)%100, (i*37)%scaleEngines), at, i)
			ev.TtftMs = 70 + float64(i%31)
			add(topics.RoutingEvents, mustMarshal(ev), at)
			i++
		}
	}
	return recs
}

// TestInstanceThousandsOfEngines: one partitioned instance and the
// combiner over scaleEngines engines on one signals partition publish
// exactly the estimates one Core computes, byte for byte, although each
// partial is several times Kafka's record limit (it travels in chunks).
// It also reports the partials' bytes per engine and pane.
func TestInstanceThousandsOfEngines(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("scale")
	cfg := config("scale")
	recs := scaleRecords(topics)
	want := coreEstimates(t, topics, cfg.Spec(), recs)
	if len(want) < 2*scaleEngines {
		t.Fatalf("one Core fired %d estimates, want at least two windows of %d engines", len(want), scaleEngines)
	}

	ensure(t, kc, topics)
	cl := testenv.Client(t, kc, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produceParts(t, cl, recs)
	est := collect(t, kc, topics.Estimates)
	parts := collect(t, kc, PartialsTopic(cfg.TopicPrefix))
	ccl := testenv.Client(t, kc, CombinerClientOpts(cfg)...)
	runUntilStopped(t, func(ctx context.Context) error { return RunCombiner(ctx, ccl, cfg) }, ccl.Close)
	runInstance(t, kc, cfg)
	testenv.Eventually(t, 20*time.Second, func() bool { return len(est.snapshot()) >= len(want) }, fmt.Sprintf("%d estimates", len(want)))
	got := byWindow(t, est.snapshot())
	n := 0
	for k, b := range want {
		if g, ok := got[k]; !ok || string(g) != string(b) {
			n++
			if n <= 3 {
				t.Errorf("%s: present %v, identical %v", k, ok, string(g) == string(b))
			}
		}
	}
	if n > 0 || len(got) != len(want) {
		t.Fatalf("%d of %d estimates missing or different; %d published", n, len(want), len(got))
	}

	// The largest partial of the signals partition: its chunks' bytes,
	// per engine and pane.
	r := newPartialReader()
	chunkBytes := map[uint64]int{}
	var biggest, panes, chunks int
	for _, rec := range parts.snapshot() {
		p, ok, err := r.add(string(rec.Key), rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		if _, gen, _, chunk := parseChunkKey(string(rec.Key)); chunk || !ok {
			chunkBytes[gen] += len(rec.Value)
			continue
		}
		h, err := decodeHeader(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		if ok && p.Topic == topics.Signals && chunkBytes[h.gen] > biggest {
			biggest, panes, chunks = chunkBytes[h.gen], len(p.Panes), h.chunks
		}
	}
	// Compacted, the topic holds the latest headers' chunks and no
	// others: every replaced generation is deleted (the tombstones
	// follow the header the combiner may already have used).
	var orphans, missing []string
	testenv.Eventually(t, 10*time.Second, func() bool {
		orphans, missing = liveChunks(t, parts.snapshot())
		return len(orphans) == 0 && len(missing) == 0
	}, "only the latest headers' chunks live")
	if biggest <= 1_000_012 {
		t.Fatalf("largest partial %d bytes: within one record's limit, the test does not exercise chunks", biggest)
	}
	t.Logf("%d estimates as one Core's; largest signals partial %d bytes in %d chunks, %d panes: %.0f B per engine and pane",
		len(want), biggest, chunks, panes, float64(biggest)/float64(panes*scaleEngines))
}

// liveChunks compacts the partials topic's records (the latest record
// per key) and returns the chunks no latest header names (orphans) and
// those named but deleted or never written (missing).
func liveChunks(t *testing.T, recs []*kgo.Record) (orphans, missing []string) {
	t.Helper()
	latest := map[string][]byte{}
	for _, rec := range recs {
		latest[string(rec.Key)] = rec.Value
	}
	named := map[string]bool{}
	for k, v := range latest {
		if _, _, _, chunk := parseChunkKey(k); chunk {
			continue
		}
		h, err := decodeHeader(v)
		if err != nil {
			t.Fatal(err)
		}
		for i := range h.chunks {
			named[chunkKey(k, h.gen, i)] = true
		}
	}
	for k, v := range latest {
		if _, _, _, chunk := parseChunkKey(k); chunk && len(v) > 0 && !named[k] {
			orphans = append(orphans, k)
		}
	}
	for k := range named {
		if len(latest[k]) == 0 {
			missing = append(missing, k)
		}
	}
	return orphans, missing
}

// BenchmarkPartialCodec encodes and decodes two partials with 4 open
// panes (as when an instance catches up), and reports their bytes per
// entity (engine or (cluster, engine) pair) and pane, before and after
// gzip (the producers' batch compression, per chunk): signals of
// scaleEngines engines (TestInstanceThousandsOfEngines's input), and
// routing events of 100 clusters to 1,202 engines each (120,200 pairs,
// one event per pair and pane).
func BenchmarkPartialCodec(b *testing.B) {
	topics := streams.TopicsFor("bench")
	spec := config("bench").Spec()
	b.Run("signals", func(b *testing.B) {
		s, err := newShard(topics, spec, topics.Signals, 0)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range scaleRecords(topics) {
			if r.Topic == topics.Signals && r.Timestamp.Before(time.Date(2026, 11, 2, 9, 0, 20, 0, time.UTC)) {
				if _, _, err := s.Handle(r); err != nil {
					b.Fatal(err)
				}
			}
		}
		benchPartial(b, s.partial(), scaleEngines)
	})
	b.Run("routing", func(b *testing.B) {
		s, err := newShard(topics, spec, topics.RoutingEvents, 0)
		if err != nil {
			b.Fatal(err)
		}
		from := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
		var off int64
		for pane := range 4 {
			at := from.Add(time.Duration(pane) * spec.Slide)
			for c := range 100 {
				for e := range 1202 {
					ev := routing(fmt.Sprintf("r%03d", c), fmt.Sprintf("r%03d-h100-%04d", (c+e/401)%100, e), at, int(off))
					if _, _, err := s.Handle(&kgo.Record{Topic: topics.RoutingEvents, Offset: off, Value: mustMarshal(ev), Timestamp: at}); err != nil {
						b.Fatal(err)
					}
					off++
				}
			}
		}
		benchPartial(b, s.partial(), 100*1202)
	})
}

func benchPartial(b *testing.B, p partial, entities int) {
	hdr, chunks := encodePartial(p, 7)
	size, zipped := len(hdr), 0
	for _, c := range chunks {
		size += len(c)
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(c); err != nil {
			b.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			b.Fatal(err)
		}
		zipped += buf.Len()
	}
	per := float64(len(p.Panes) * entities)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encodePartial(p, 7)
		}
		b.ReportMetric(float64(size), "bytes")
		b.ReportMetric(float64(size)/per, "B/entity-pane")
		b.ReportMetric(float64(zipped)/per, "gzipB/entity-pane")
		b.ReportMetric(float64(len(chunks)), "chunks")
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodePartial(hdr, func(i int) ([]byte, bool) { return chunks[i], i < len(chunks) }); err != nil {
				b.Fatal(err)
			}
		}
	})
}
