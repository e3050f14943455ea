package process

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// benchData is one shared in-process Kafka holding the benchmark records:
// benchEngines engines signalling every 2s and 3 clusters' routing events
// at benchRPS over benchSpan (the mix of a fleet where engines serve ~5
// requests/s each), then one sentinel signal that lets every window fire.
type benchData struct {
	kc      *kfake.Cluster
	topics  streams.Topics
	records int
	lastEnd time.Time // end of the last window to fire
}

const (
	benchEngines = 200
	benchRPS     = 1000
	benchSpan    = 60 * time.Second
)

var (
	benchOnce sync.Once
	bench     *benchData
	// benchGroups numbers consumer groups, so runs repeated with -count
	// start fresh instead of resuming an earlier run's checkpoint.
	benchGroups atomic.Int64
)

func loadBench(b *testing.B) *benchData {
	b.Helper()
	benchOnce.Do(func() {
		kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3))
		if err != nil {
			b.Fatal(err)
		}
		d := &benchData{kc: kc, topics: streams.TopicsFor("bench")}
		cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ProducerBatchMaxBytes(4<<20))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		ctx := context.Background()
		if err := streams.EnsureTopics(ctx, cl, d.topics, 3); err != nil {
			b.Fatal(err)
		}
		from := time.Now().Add(-benchSpan - time.Minute).Truncate(10 * time.Second)
		var recs []*kgo.Record
		add := func(topic, key string, m proto.Message) {
			v, _ := proto.Marshal(m)
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key), Value: v})
		}
		i := 0
		for dt := time.Duration(0); dt < benchSpan; dt += time.Second / benchRPS {
			at := from.Add(dt)
			if dt%(2*time.Second) == 0 {
				for e := 0; e < benchEngines; e++ {
					id := fmt.Sprintf("e%04d", e)
					add(d.topics.Signals, id, signal(id, []string{"h100", "a100", "l4"}[e%3], at, float64(e%50), 5))
				}
			}
			c := []string{"us", "eu", "ap"}[i%3]
			add(d.topics.RoutingEvents, c, routing(c, fmt.Sprintf("e%04d", i%benchEngines), at, i))
			i++
		}
		add(d.topics.Signals, "sentinel", signal("sentinel", "h100", from.Add(benchSpan+time.Minute), 1, 1))
		for len(recs) > 0 {
			n := min(len(recs), 5000)
			if err := cl.ProduceSync(ctx, recs[:n]...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			d.records += n
			recs = recs[n:]
		}
		d.lastEnd = from.Add(benchSpan)
		bench = d
	})
	if bench == nil {
		b.Fatal("benchmark data not loaded")
	}
	return bench
}

// BenchmarkProcessorThroughput runs a fresh processor (new group, so no
// checkpoint) over every record per iteration: consume, decode, validate,
// window, fit, publish estimates, checkpoint. records/s is the rate
// through the whole pipeline, from creating the client to the checkpoint
// that covers every record and window. The wall-clock breakdown per run:
// first_records_ms from then until the first polled records are handled
// (client, topics, checkpoint read, group join, first fetch), handled_ms
// until the last record is handled, and tail_ms from then until that
// final checkpoint (the last windows' fits and estimates, their
// acknowledgements, the checkpoint and the offset commit).
func BenchmarkProcessorThroughput(b *testing.B) {
	d := loadBench(b)
	b.ReportAllocs()
	b.ResetTimer()
	var elapsed, first, handled time.Duration
	for i := 0; i < b.N; i++ {
		// As from Run before the client was injected: the time includes
		// creating the client.
		start := time.Now()
		s, closeClient := newProcessor(b, d.kc, Config{
			TopicPrefix: "bench", Group: fmt.Sprintf("bench-%d", benchGroups.Add(1)),
			Window: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second,
			Logger: slog.New(slog.DiscardHandler),
		})
		done := make(chan struct{})
		var once sync.Once
		s.onCheckpoint = func() {
			st := s.Stats()
			if int(st.SignalsConsumed+st.RoutingEventsConsumed) == d.records && !st.LastWindowEnd.Before(d.lastEnd) {
				once.Do(func() { close(done) })
			}
		}
		var firstAt, lastAt time.Time // set on the loop, read after done
		var seen int
		s.onHandled = func(n int) {
			if seen == 0 {
				firstAt = time.Now()
			}
			if seen += n; seen >= d.records {
				lastAt = time.Now()
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			err := s.Run(ctx, s.cl)
			closeClient()
			errc <- err
		}()
		select {
		case <-done:
		case err := <-errc:
			b.Fatalf("processor stopped: %v", err)
		case <-time.After(5 * time.Minute):
			b.Fatalf("processor did not finish: %+v", s.Stats())
		}
		end := time.Now()
		elapsed += end.Sub(start)
		cancel()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		first += firstAt.Sub(start)
		handled += lastAt.Sub(firstAt)
	}
	b.ReportMetric(float64(d.records)*float64(b.N)/elapsed.Seconds(), "records/s")
	ms := func(t time.Duration) float64 { return float64(t.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(first), "first_records_ms")
	b.ReportMetric(ms(handled), "handled_ms")
	b.ReportMetric(ms(elapsed-first-handled), "tail_ms")
}

// BenchmarkRawConsume consumes the same records in a fresh consumer group
// per iteration with a bare franz-go poll loop, doing nothing with them.
// first_records_ms is the time until the first poll returns records.
func BenchmarkRawConsume(b *testing.B) {
	d := loadBench(b)
	b.ReportAllocs()
	b.ResetTimer()
	var elapsed, first time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cl, err := kgo.NewClient(kgo.SeedBrokers(d.kc.ListenAddrs()...),
			kgo.ConsumerGroup(fmt.Sprintf("raw-%d", benchGroups.Add(1))),
			kgo.ConsumeTopics(d.topics.Signals, d.topics.RoutingEvents),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		var bytes int
		for n < d.records {
			fs := cl.PollRecords(context.Background(), 10000)
			if n == 0 && fs.NumRecords() > 0 {
				first += time.Since(start)
			}
			fs.EachRecord(func(r *kgo.Record) { n++; bytes += len(r.Value) })
		}
		cl.Close()
		elapsed += time.Since(start)
	}
	b.ReportMetric(float64(d.records)*float64(b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(first.Microseconds())/1000/float64(b.N), "first_records_ms")
}

// BenchmarkRawConsumeDecode is BenchmarkRawConsume plus what any
// consumer of these topics does at the least: proto.Unmarshal of every
// record into its schema type (one reused message per topic; no
// validation, no state). For context next to the processor's rate.
func BenchmarkRawConsumeDecode(b *testing.B) {
	d := loadBench(b)
	b.ReportAllocs()
	b.ResetTimer()
	var elapsed, first time.Duration
	var sig schemas.EngineSignal
	var ev schemas.RoutingEvent
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cl, err := kgo.NewClient(kgo.SeedBrokers(d.kc.ListenAddrs()...),
			kgo.ConsumerGroup(fmt.Sprintf("rawdec-%d", benchGroups.Add(1))),
			kgo.ConsumeTopics(d.topics.Signals, d.topics.RoutingEvents),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		if err != nil {
			b.Fatal(err)
		}
		n, bad := 0, 0
		for n < d.records {
			fs := cl.PollRecords(context.Background(), 10000)
			if n == 0 && fs.NumRecords() > 0 {
				first += time.Since(start)
			}
			fs.EachRecord(func(r *kgo.Record) {
				n++
				var m proto.Message = &ev
				if r.Topic == d.topics.Signals {
					m = &sig
				}
				if proto.Unmarshal(r.Value, m) != nil {
					bad++
				}
			})
		}
		cl.Close()
		elapsed += time.Since(start)
		if bad > 0 {
			b.Fatalf("%d records did not decode", bad)
		}
	}
	b.ReportMetric(float64(d.records)*float64(b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(first.Microseconds())/1000/float64(b.N), "first_records_ms")
}

// BenchmarkCoreMemory shows the processor's window state at 10,000
// engines: the retained heap depends on engines × open panes, not on how
// many signals each engine sends (2s versus 250ms scrapes, 8× the
// records).
func BenchmarkCoreMemory(b *testing.B) {
	const engines = 10000
	for _, interval := range []time.Duration{2 * time.Second, 250 * time.Millisecond} {
		b.Run(fmt.Sprintf("engines=%d/interval=%v", engines, interval), func(b *testing.B) {
			topics := streams.TopicsFor("mem")
			var vals [][]byte
			from := time.Unix(1_800_000_000, 0)
			span := 30 * time.Second
			for e := 0; e < engines; e++ {
				v, _ := proto.Marshal(signal(fmt.Sprintf("e%05d", e), "h100", from, 1, 1))
				vals = append(vals, v)
			}
			var records int
			var heap, panes float64
			for i := 0; i < b.N; i++ {
				core, err := NewCore(topics, specForBench(), nil)
				if err != nil {
					b.Fatal(err)
				}
				core.Track(topics.Signals, 0, 0, 1<<62) // never caught up: nothing fires
				var off int64
				records = 0
				for dt := time.Duration(0); dt < span; dt += interval {
					at := from.Add(dt)
					for e := 0; e < engines; e++ {
						s := &schemas.EngineSignal{}
						_ = proto.Unmarshal(vals[e], s)
						s.EventTimeUnixMs = at.UnixMilli()
						v, _ := proto.Marshal(s)
						core.Handle(&kgo.Record{Topic: topics.Signals, Offset: off, Value: v})
						off++
						records++
					}
				}
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				heap += float64(ms.HeapAlloc)
				panes += float64(core.OpenPanes())
				runtime.KeepAlive(core)
			}
			b.ReportMetric(heap/float64(b.N)/(1<<20), "heap_MiB")
			b.ReportMetric(heap/float64(b.N)/engines, "heap_B/engine")
			b.ReportMetric(panes/float64(b.N), "open_panes")
			b.ReportMetric(float64(records), "records")
		})
	}
}

func specForBench() window.Spec {
	return window.Spec{Size: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second}
}

// BenchmarkCoreHandle measures the processor core without Kafka over the
// throughput benchmark's records: decode, validate and window every
// record, then fire every window (merges, fits with a cold fit cache,
// estimates; no encoding or publishing).
func BenchmarkCoreHandle(b *testing.B) {
	topics := streams.TopicsFor("bench")
	var recs []*kgo.Record
	offs := map[string]int64{}
	from := time.Unix(1_800_000_000, 0)
	add := func(topic, key string, m proto.Message) {
		v, _ := proto.Marshal(m)
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key), Value: v, Offset: offs[topic], Timestamp: from.Add(benchSpan)})
		offs[topic]++
	}
	i := 0
	for dt := time.Duration(0); dt < benchSpan; dt += time.Second / benchRPS {
		at := from.Add(dt)
		if dt%(2*time.Second) == 0 {
			for e := 0; e < benchEngines; e++ {
				id := fmt.Sprintf("e%04d", e)
				add(topics.Signals, id, signal(id, []string{"h100", "a100", "l4"}[e%3], at, float64(e%50), 5))
			}
		}
		c := []string{"us", "eu", "ap"}[i%3]
		add(topics.RoutingEvents, c, routing(c, fmt.Sprintf("e%04d", i%benchEngines), at, i))
		i++
	}
	add(topics.Signals, "sentinel", signal("sentinel", "h100", from.Add(benchSpan+time.Minute), 1, 1))
	b.ReportAllocs()
	b.ResetTimer()
	var estimates int
	for b.Loop() {
		core, err := NewCore(topics, specForBench(), nil)
		if err != nil {
			b.Fatal(err)
		}
		estimates = 0
		for j, r := range recs {
			if out, reason := core.Handle(r); out != Accepted {
				b.Fatalf("record %d: %v %s", j, out, reason)
			}
			if j%10000 == 9999 || j == len(recs)-1 {
				for _, f := range core.Fire() {
					estimates += len(f.Estimates)
				}
			}
		}
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(estimates), "estimates")
}
