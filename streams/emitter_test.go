package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

// TestEmitterBrokersDown: with the brokers gone, the records held never
// exceed the bounds, every record over them is refused and counted as
// dropped, and the records held when the client gives up on them (here:
// it is closed, as the gateway closes it on shutdown) are counted as
// dropped too: records_total = produced_total + dropped_total + held.
func TestEmitterBrokersDown(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("down")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := streams.EnsureTopics(ctx, testenv.Client(t, kc), topics, 1); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ProducerLinger(0), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const maxRecords, maxBytes = 32, 1500
	reg := prometheus.NewRegistry()
	em, err := streams.NewEmitter(cl, topics.RoutingEvents, "down", maxRecords, reg, streams.MaxBufferedBytes(maxBytes))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- em.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	ev := func(i int) *schemas.RoutingEvent {
		return &schemas.RoutingEvent{SchemaVersion: schemas.Version, RequestId: "r", Cluster: "c", EngineId: "e", PromptTokens: uint32(i)}
	}
	for i := range 3 {
		if !em.Emit("k", ev(i)) {
			t.Fatalf("emit %d dropped with Kafka up", i)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return counter(t, reg, "switchyard_emitter_produced_total") == 3 }, "3 records produced")

	kc.Close()
	const n = 400
	accepted := 0
	for i := range n {
		if em.Emit("k", ev(i)) {
			accepted++
		}
		if recs, bytes := em.Buffered(); recs > maxRecords || bytes > maxBytes {
			t.Fatalf("holding %d records, %d bytes: over the bounds %d, %d", recs, bytes, maxRecords, maxBytes)
		}
	}
	if accepted == 0 || accepted > n/2 {
		t.Errorf("accepted %d of %d with a bound of %d records", accepted, n, maxRecords)
	}
	held, _ := em.Buffered()
	if got := counter(t, reg, "switchyard_emitter_dropped_total"); got != float64(n-accepted) || held != int64(accepted) {
		t.Errorf("dropped %v, holding %d: want %d refused and %d held", got, held, n-accepted, accepted)
	}
	cl.Close()
	testenv.Eventually(t, 10*time.Second, func() bool {
		recs, _ := em.Buffered()
		return recs == 0
	}, "the closed client fails the held records")
	total := counter(t, reg, "switchyard_emitter_records_total")
	produced := counter(t, reg, "switchyard_emitter_produced_total")
	dropped := counter(t, reg, "switchyard_emitter_dropped_total")
	if total != 3+n || produced != 3 || dropped != n {
		t.Errorf("records %v, produced %v, dropped %v: want %d, 3, %d", total, produced, dropped, 3+n, n)
	}
	if failed := counter(t, reg, "switchyard_emitter_failed_total"); failed != float64(accepted) {
		t.Errorf("failed %v, want the %d accepted records", failed, accepted)
	}
	if g := counter(t, reg, "switchyard_emitter_buffered_records"); g != 0 {
		t.Errorf("buffered_records gauge %v after the failures", g)
	}
}

// TestEmitterByteBound: records over the byte bound are dropped even
// when the record bound has room.
func TestEmitterByteBound(t *testing.T) {
	em, err := streams.NewEmitter(nil, "t", "bytes", 1000, nil, streams.MaxBufferedBytes(100))
	if err != nil {
		t.Fatal(err)
	}
	// Not running: nothing leaves the buffer.
	big := &schemas.RoutingEvent{RequestId: string(make([]byte, 30))}
	accepted := 0
	for range 10 {
		if em.Emit("k", big) {
			accepted++
		}
	}
	_, bytes := em.Buffered()
	if accepted == 0 || accepted >= 10 || bytes > 100 {
		t.Errorf("accepted %d of 10 records of ~%d bytes, holding %d bytes, with a bound of 100 bytes", accepted, bytes/int64(max(accepted, 1)), bytes)
	}
}
