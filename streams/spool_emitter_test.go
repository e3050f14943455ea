package streams_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/spool"
)

// logBuf collects log lines.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSpoolOutageNoEventLostOrDoubled: Kafka refuses every produce for
// an outage of D simulated seconds while routing events arrive at R per
// second (emitted without waiting: the outage's length is its load, R·D
// events); when Kafka comes back, the topic holds every request id
// exactly once, in the order emitted, and nothing was dropped, as long as
// R·D events fit in the spool. A spool too small for the outage drops
// what does not fit, and every drop is counted (dropped_total = ids
// missing from the topic) and logged at WARN.
func TestSpoolOutageNoEventLostOrDoubled(t *testing.T) {
	const rate = 100 // routing events per simulated second
	cases := []struct {
		name     string
		outage   time.Duration
		spoolMax int64
		lossy    bool
	}{
		{"60s", 60 * time.Second, 8 << 20, false},
		{"5min", 5 * time.Minute, 8 << 20, false},
		{"5min_spool_too_small", 5 * time.Minute, 1 << 20, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kc := testenv.Kafka(t, kfake.DefaultNumPartitions(1))
			topics := streams.TopicsFor("spool")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := streams.EnsureTopics(ctx, testenv.Client(t, kc), topics, 1); err != nil {
				t.Fatal(err)
			}
			var down atomic.Bool
			kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				kc.KeepControl()
				if down.Load() {
					return nil, errors.New("injected outage"), true // the broker drops the connection
				}
				return nil, nil, false
			})
			prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ProducerLinger(time.Millisecond),
				kgo.MaxBufferedRecords(2*64), kgo.RetryBackoffFn(func(int) time.Duration { return 5 * time.Millisecond }))
			if err != nil {
				t.Fatal(err)
			}
			sp, err := spool.Open(t.TempDir(), tc.spoolMax)
			if err != nil {
				t.Fatal(err)
			}
			var logs logBuf
			reg := prometheus.NewRegistry()
			em, err := streams.NewEmitter(prod, topics.RoutingEvents, "gateway", 64, reg,
				streams.Spool(sp), streams.EmitterLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- em.Run(rctx) }()
			defer func() {
				stop()
				<-done
				prod.Close()
				if err := em.Close(); err != nil {
					t.Error(err)
				}
			}()

			var ids []string
			emit := func(n int) {
				for range n {
					id := fmt.Sprintf("req-%07d", len(ids))
					ids = append(ids, id)
					em.Emit(id, &schemas.RoutingEvent{SchemaVersion: schemas.Version, RequestId: id, Cluster: "c", EngineId: "e", PromptTokens: 100})
				}
			}
			emit(rate * 5) // before: Kafka up
			down.Store(true)
			emit(rate * int(tc.outage/time.Second))
			if recs, _ := em.Buffered(); recs > 64 {
				t.Fatalf("holding %d records in memory, bound 64", recs)
			}
			if sp.Bytes() > tc.spoolMax {
				t.Fatalf("spool holds %d bytes, bound %d", sp.Bytes(), tc.spoolMax)
			}
			spooledBytes := sp.Bytes()
			down.Store(false)
			emit(rate * 5) // after: Kafka back, spool draining
			testenv.Eventually(t, 45*time.Second, func() bool { return sp.Pending() == 0 }, "spool replayed")
			testenv.Eventually(t, 10*time.Second, func() bool { r, _ := em.Buffered(); return r == 0 }, "memory drained")

			got := consumeIDs(t, kc, topics.RoutingEvents)
			seen := map[string]int{}
			for _, id := range got {
				seen[id]++
			}
			missing, doubled := 0, 0
			for _, id := range ids {
				switch seen[id] {
				case 0:
					missing++
				case 1:
				default:
					doubled++
				}
			}
			dropped := counter(t, reg, "switchyard_emitter_dropped_total")
			t.Logf("%d events (%d during the outage), spool peak %d bytes of %d: %d consumed, %d missing, %d doubled, %v dropped",
				len(ids), rate*int(tc.outage/time.Second), spooledBytes, tc.spoolMax, len(got), missing, doubled, dropped)
			if doubled != 0 || len(got) != len(ids)-missing {
				t.Fatalf("%d ids doubled; %d records for %d distinct ids", doubled, len(got), len(ids)-missing)
			}
			if float64(missing) != dropped || em.Dropped() != uint64(missing) {
				t.Fatalf("%d ids missing, dropped_total %v, Dropped %d: every loss must be counted", missing, dropped, em.Dropped())
			}
			if !tc.lossy {
				if missing != 0 {
					t.Fatalf("%d events lost with a spool large enough", missing)
				}
				for i := range got {
					if got[i] != ids[i] {
						t.Fatalf("record %d is %s, emitted %s: out of order", i, got[i], ids[i])
					}
				}
				return
			}
			if missing == 0 {
				t.Fatal("a spool too small for the outage lost nothing: the bound does not bind")
			}
			if !strings.Contains(logs.String(), "level=WARN msg=\"records dropped") || !strings.Contains(logs.String(), "spool_full=") {
				t.Fatalf("drops not logged at WARN with their reason:\n%s", logs.String())
			}
		})
	}
}

// consumeIDs reads the request ids of every record of topic.
func consumeIDs(t *testing.T, kc *kfake.Cluster, topic string) []string {
	t.Helper()
	cl := testenv.Client(t, kc, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	adm := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	end := endOffset(t, ctx, adm, topic)
	var ids []string
	var read int64
	for read < end {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", read, end, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			var ev schemas.RoutingEvent
			if err := proto.Unmarshal(r.Value, &ev); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ev.RequestId)
		})
	}
	return ids
}

// endOffset is the sum of topic's partitions' end offsets.
func endOffset(t *testing.T, ctx context.Context, cl *kgo.Client, topic string) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range int32(1) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			n += p.Offset
		}
	}
	return n
}
