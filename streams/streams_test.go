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

func TestTopicsFor(t *testing.T) {
	for _, tc := range []struct{ prefix, signals string }{
		{"", "switchyard.engine.signals"},
		{"x", "x.engine.signals"},
	} {
		if got := streams.TopicsFor(tc.prefix).Signals; got != tc.signals {
			t.Errorf("TopicsFor(%q).Signals = %q, want %q", tc.prefix, got, tc.signals)
		}
	}
	if n := len(streams.TopicsFor("").All()); n != 6 {
		t.Errorf("All() has %d topics", n)
	}
}

func consumeAll(t *testing.T, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	testenv.Eventually(t, 10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		out = append(out, cl.PollFetches(ctx).Records()...)
		return len(out) >= n
	}, "records consumed")
	return out
}

func TestEmitterAndDeadLetter(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("st")
	cl := testenv.Client(t, kc)
	ctx := context.Background()
	if err := streams.EnsureTopics(ctx, cl, topics, 2); err != nil {
		t.Fatal(err)
	}
	if err := streams.EnsureTopics(ctx, cl, topics, 2); err != nil {
		t.Fatalf("EnsureTopics is not idempotent: %v", err)
	}

	t.Run("emitter", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		em, err := streams.NewEmitter(cl, topics.Signals, "test", 8, reg)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- em.Run(rctx) }()
		for i := 0; i < 5; i++ {
			if !em.Emit("e1", &schemas.EngineSignal{SchemaVersion: schemas.Version, EngineId: "e1"}) {
				t.Errorf("emit %d dropped", i)
			}
		}
		rd := testenv.Client(t, kc, kgo.ConsumeTopics(topics.Signals), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		recs := consumeAll(t, rd, 5)
		if len(recs) != 5 || string(recs[0].Key) != "e1" {
			t.Errorf("got %d records", len(recs))
		}
		for _, r := range recs {
			ct, _ := streams.Header(r, "content-type")
			msg, _ := streams.Header(r, "message")
			if ct != "application/x-protobuf" || msg != "switchyard.v1.EngineSignal" {
				t.Errorf("headers %v", r.Headers)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if em.Emit("e1", &schemas.EngineSignal{}) {
			t.Error("emit after stop accepted")
		}
		if got := counter(t, reg, "switchyard_emitter_produced_total"); got != 5 {
			t.Errorf("produced_total = %v", got)
		}
	})

	t.Run("emitter_never_blocks", func(t *testing.T) {
		em, err := streams.NewEmitter(cl, topics.Signals, "full", 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Not running: the buffer fills and further emits are dropped.
		accepted := 0
		for i := 0; i < 10; i++ {
			if em.Emit("k", &schemas.EngineSignal{}) {
				accepted++
			}
		}
		if accepted != 2 {
			t.Errorf("accepted %d of 10 with a buffer of 2", accepted)
		}
	})

	t.Run("dead_letter", func(t *testing.T) {
		src := &kgo.Record{Topic: topics.Signals, Partition: 1, Offset: 42, Key: []byte("k"), Value: []byte{0xff},
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}}
		dl := streams.NewDeadLetter(cl, topics.DeadLetter)
		if err := dl.Send(ctx, src, "undecodable: bad bytes"); err != nil {
			t.Fatal(err)
		}
		rd := testenv.Client(t, kc, kgo.ConsumeTopics(topics.DeadLetter), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		r := consumeAll(t, rd, 1)[0]
		if streams.Reason(r) != "undecodable: bad bytes" || string(r.Value) != "\xff" || string(r.Key) != "k" {
			t.Errorf("dead letter = %+v", r)
		}
		hs := map[string]string{}
		for _, h := range r.Headers {
			hs[h.Key] = string(h.Value)
		}
		if hs["h"] != "v" || hs[streams.HeaderDLQTopic] != topics.Signals || hs[streams.HeaderDLQPartition] != "1" || hs[streams.HeaderDLQOffset] != "42" {
			t.Errorf("headers = %v", hs)
		}
		if streams.Reason(src) != "" {
			t.Error("reason on a record without the header")
		}
	})
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			if m := mf.GetMetric()[0]; m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// TestEmitterRegistrationError: a metric of the same name but another
// kind already in the registry is an error from NewEmitter, not a silent
// emitter without metrics.
func TestEmitterRegistrationError(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_emitter_records_total", Help: "clash"}))
	if _, err := streams.NewEmitter(nil, "t", "x", 1, reg); err == nil {
		t.Fatal("NewEmitter accepted a registry with a clashing metric")
	}
	if _, err := streams.NewEmitter(nil, "t", "x", 1, prometheus.NewRegistry()); err != nil {
		t.Fatalf("fresh registry: %v", err)
	}
}
