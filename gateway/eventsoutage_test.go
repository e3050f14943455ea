package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
)

// TestKafkaOutageEventsCountedAsDropped: with the brokers stopped, the
// gateway keeps answering, the routing events it cannot deliver are
// counted as dropped (the emitter's counter covers every one of them,
// the gateway's those refused at once), and the events held for Kafka
// stay within the emitter's bounds.
func TestKafkaOutageEventsCountedAsDropped(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("outage")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := streams.EnsureTopics(ctx, testenv.Client(t, kc), topics, 1); err != nil {
		t.Fatal(err)
	}
	const buffer = 32
	prod, err := kgo.NewClient(append(streams.EmitterProduceOpts(buffer), kgo.SeedBrokers(kc.ListenAddrs()...))...)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	em, err := streams.NewEmitter(prod, topics.RoutingEvents, "gateway", buffer, reg)
	if err != nil {
		t.Fatal(err)
	}
	ectx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- em.Run(ectx) }()
	t.Cleanup(func() { // after the gateway stops: close the client, which fails what it holds
		stop()
		prod.Close()
		if err := <-done; err != nil {
			t.Errorf("emitter: %v", err)
		}
	})
	e := newFakeEngine(t, "a")
	g, base := startGateway(t, Events(em), Engines(static(e)...))

	metric := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatalf("%s not registered", name)
		return 0
	}
	for range 3 {
		if s, _, body := post(t, ctx, base, chatBody(false, "x"), nil); s != 200 {
			t.Fatalf("%d %s", s, body)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return metric("switchyard_emitter_produced_total") == 3 }, "3 events produced")

	kc.Close()
	const n = 200
	for i := range n {
		if s, _, body := post(t, ctx, base, chatBody(false, "x"), nil); s != 200 {
			t.Fatalf("request %d during the outage: %d %s", i, s, body)
		}
		if recs, bytes := em.Buffered(); recs > buffer || bytes > streams.DefaultEmitterBytes {
			t.Fatalf("emitter holds %d events, %d bytes: over its bounds", recs, bytes)
		}
	}
	held, _ := em.Buffered()
	dropped := metric("switchyard_emitter_dropped_total")
	if held == 0 || dropped != float64(n)-float64(held) {
		t.Errorf("emitter dropped %v, holds %d, of %d events during the outage", dropped, held, n)
	}
	if gw := g.Stats().EventsDropped; float64(gw) != dropped {
		t.Errorf("gateway counted %d dropped, the emitter %v", gw, dropped)
	}
}
