package process

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/window"
)

// TestFutureRecordNeverMovesWatermark: with a clock, a routing
// event dated 4 minutes ahead (with its Kafka timestamp ahead too) is
// dead-lettered with reason future_event_time; the watermark and the
// checkpoint stay where the real records put them, and the next real
// records still count (none is late).
func TestFutureRecordNeverMovesWatermark(t *testing.T) {
	topics := streams.TopicsFor("fut")
	core, err := NewCore(topics, window.Spec{Size: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(20 * time.Second)
	core.SetClock(now, DefaultMaxClockSkew)
	off := int64(0)
	handle := func(at time.Time, i int) (Outcome, string) {
		t.Helper()
		b, err := proto.Marshal(routing("us", "e1", at, i))
		if err != nil {
			t.Fatal(err)
		}
		off++
		return core.Handle(&kgo.Record{Topic: topics.RoutingEvents, Partition: 0, Offset: off - 1, Value: b, Timestamp: at})
	}
	for i := range 10 {
		if out, reason := handle(t0.Add(time.Duration(i)*time.Second), i); out != Accepted {
			t.Fatalf("record %d: %v %s", i, out, reason)
		}
	}
	core.fire()
	wm, cp := core.Watermark(), core.Checkpoint().Watermark
	out, reason := handle(now.Add(4*time.Minute), 100)
	if out != DeadLettered || !strings.HasPrefix(reason, "future_event_time: ") {
		t.Fatalf("future record: %v %q", out, reason)
	}
	core.fire()
	if core.Watermark() != wm || core.Checkpoint().Watermark != cp {
		t.Fatalf("watermark moved: %v -> %v (checkpoint %d -> %d)", wm, core.Watermark(), cp, core.Checkpoint().Watermark)
	}
	for i := 10; i < 15; i++ {
		if out, reason := handle(t0.Add(time.Duration(i)*time.Second), i); out != Accepted {
			t.Fatalf("record %d after the future one: %v %s", i, out, reason)
		}
	}
	core.SetClock(time.Time{}, 0) // replay: no clock, no limit
	if out, _ := handle(now.Add(4*time.Minute), 101); out != Accepted {
		t.Fatalf("without a limit: %v", out)
	}
}

// TestRecordWithinSkewNeverPassesClock: a record dated 30s ahead (within
// the skew) is accepted, but the watermark stops at the clock, so the
// real records that follow are not late.
func TestRecordWithinSkewNeverPassesClock(t *testing.T) {
	topics := streams.TopicsFor("skew")
	core, err := NewCore(topics, window.Spec{Size: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(20 * time.Second)
	core.SetClock(now, DefaultMaxClockSkew)
	off := int64(0)
	handle := func(at time.Time) Outcome {
		t.Helper()
		b, err := proto.Marshal(routing("us", "e1", at, int(off)))
		if err != nil {
			t.Fatal(err)
		}
		off++
		out, _ := core.Handle(&kgo.Record{Topic: topics.RoutingEvents, Offset: off - 1, Value: b, Timestamp: at})
		return out
	}
	for i := range 10 {
		if out := handle(t0.Add(time.Duration(i) * time.Second)); out != Accepted {
			t.Fatalf("record %d: %v", i, out)
		}
	}
	if out := handle(now.Add(30 * time.Second)); out != Accepted {
		t.Fatalf("record within the skew: %v", out)
	}
	core.fire()
	if wm := core.Watermark(); wm.After(now) {
		t.Fatalf("watermark %v passed the clock %v", wm, now)
	}
	for i := 15; i < 20; i++ {
		if out := handle(t0.Add(time.Duration(i) * time.Second)); out != Accepted {
			t.Fatalf("real record at +%ds after the early one: %v", i, out)
		}
	}
}

// TestSanitizeFutureCheckpoint: a checkpoint whose watermark is beyond
// the clock plus the skew loses its window clock on restore (offsets are
// kept); a sane one is kept whole.
func TestSanitizeFutureCheckpoint(t *testing.T) {
	kc := testenv.Kafka(t)
	p, _ := newProcessor(t, kc, config("sane"))
	future := time.Now().Add(4 * time.Minute).UnixMilli()
	marks := []PartitionMark{{Topic: "t", Partition: 0, Resume: 3, Consumed: 5}}
	got := p.sanitize(Checkpoint{Version: 1, Watermark: future, Next: future, Partitions: marks})
	if got.Watermark != 0 || got.Next != 0 || len(got.Partitions) != 1 {
		t.Fatalf("future checkpoint sanitized to %+v", got)
	}
	past := t0.UnixMilli()
	if got := p.sanitize(Checkpoint{Version: 1, Watermark: past, Next: past, Partitions: marks}); got.Watermark != past || got.Next != past {
		t.Fatalf("sane checkpoint changed to %+v", got)
	}
}

// TestStopWithBrokersGone: a processor stopped after its Kafka has gone
// returns from Run, and its client closes, within 10s.
func TestStopWithBrokersGone(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("gone")
	cl := ensure(t, kc, topics)
	produce(t, cl, topics, workload(t0, 20*time.Second))
	s, closeClient := newProcessor(t, kc, config("gone"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, s.cl) }()
	testenv.Eventually(t, 15*time.Second, func() bool { return s.Stats().RoutingEventsConsumed > 0 }, "processor consuming")
	kc.Close()
	stopped := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of stopping with the brokers gone")
	}
	closeClient()
	if d := time.Since(stopped); d > 10*time.Second {
		t.Fatalf("stopped in %v", d)
	} else {
		t.Logf("stopped in %v with the brokers gone", d)
	}
}

// TestStoppedProcessorLeavesGroup: a processor that stops leaves the
// group, so one started right after it gets every partition at once, not
// after the session timeout (45s here; a member that did not leave would
// hold the group that long): it counts all 40 routing events produced
// after the first stopped within 15s.
func TestStoppedProcessorLeavesGroup(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("leave")
	cl := ensure(t, kc, topics)
	cfg := config("leave")
	cfg.SessionTimeout = 45 * time.Second
	first, stopFirst := start(t, kc, cfg)
	produce(t, cl, topics, workload(t0, 10*time.Second))
	testenv.Eventually(t, 15*time.Second, func() bool { return first.Stats().RoutingEventsConsumed == 40 }, "first processor consumed its 40 events")
	stopFirst()
	left := time.Now()
	next, _ := start(t, kc, cfg)
	produce(t, cl, topics, workload(t0.Add(10*time.Second), 10*time.Second))
	testenv.Eventually(t, 15*time.Second, func() bool { return next.Stats().RoutingEventsConsumed == 40 }, "next processor counted the 40 new events")
	t.Logf("next processor had every partition %v after the first stopped", time.Since(left))
}

// TestRestartedStaticMemberTakesOver: a processor with an instance id
// that stops without leaving (as after kill -9: a static member never
// leaves) is replaced at once by one restarted with the same id, though
// the session timeout is 45s.
func TestRestartedStaticMemberTakesOver(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("static")
	cl := ensure(t, kc, topics)
	cfg := config("static")
	cfg.SessionTimeout, cfg.InstanceID = 45*time.Second, "processor-0"
	first, stopFirst := start(t, kc, cfg)
	produce(t, cl, topics, workload(t0, 10*time.Second))
	testenv.Eventually(t, 15*time.Second, func() bool { return first.Stats().RoutingEventsConsumed == 40 }, "first processor consumed its 40 events")
	stopFirst()
	gone := time.Now()
	next, _ := start(t, kc, cfg)
	produce(t, cl, topics, workload(t0.Add(10*time.Second), 10*time.Second))
	testenv.Eventually(t, 15*time.Second, func() bool { return next.Stats().RoutingEventsConsumed == 40 }, "restarted processor counted the 40 new events")
	t.Logf("restarted static member had every partition %v after the first stopped", time.Since(gone))
}

// TestFutureRecordSaysHowFarBeyondTheLimit: the dead-letter reason of a
// future-dated record says how far its event time is beyond the clock
// plus the allowed skew, so an operator can tell a skewed clock from a
// forged time.
func TestFutureRecordSaysHowFarBeyondTheLimit(t *testing.T) {
	topics := streams.TopicsFor("fut2")
	core, err := NewCore(topics, window.Spec{Size: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(20 * time.Second)
	core.SetClock(now, 30*time.Second)
	b, err := proto.Marshal(routing("us", "e1", now.Add(4*time.Minute), 1))
	if err != nil {
		t.Fatal(err)
	}
	out, reason := core.Handle(&kgo.Record{Topic: topics.RoutingEvents, Value: b, Timestamp: now})
	if want := "is 3m30s ahead of the processor's clock plus the allowed skew"; out != DeadLettered || !strings.Contains(reason, want) {
		t.Fatalf("future record: %v %q, want dead-lettered saying %q", out, reason, want)
	}
}
