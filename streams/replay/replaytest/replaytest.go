// Package replaytest writes the input history replay tests run over.
package replaytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
)

// History creates topics in kc and produces dur of traffic starting at
// from, with Kafka timestamps equal to event times: two engines (us/h100,
// eu/l4) signalling every 2s and streaming requests' routing events from
// clusters us and eu every 100ms.
func History(t testing.TB, kc *kfake.Cluster, topics streams.Topics, from time.Time, dur time.Duration) {
	t.Helper()
	cl := testenv.Client(t, kc)
	if err := streams.EnsureTopics(context.Background(), cl, topics, 3); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	add := func(topic, key string, at time.Time, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(key), Value: b, Timestamp: at})
	}
	i := 0
	for d := time.Duration(0); d < dur; d += 100 * time.Millisecond {
		at := from.Add(d)
		if d%(2*time.Second) == 0 {
			for _, e := range []struct{ id, region, gpu string }{{"e1", "us", "h100"}, {"e2", "eu", "l4"}} {
				run := float64(i % 40)
				add(topics.Signals, e.id, at, &schemas.EngineSignal{
					SchemaVersion: schemas.Version, EngineId: e.id, EndpointUrl: "http://" + e.id, Region: e.region, GpuClass: e.gpu,
					EventTimeUnixMs: at.UnixMilli(), ReadyReplicas: 1, Health: schemas.Health_HEALTH_HEALTHY,
					RunningRequests: run, IntervalSeconds: 2, RequestsFinished: 10, GenerationTokens: 1000, MaxBatch: 64, KvCapacityTokens: 64 * 2048,
					TtftSeconds: &schemas.Histogram{Bounds: []float64{1}, Counts: []uint64{10, 0}, Sum: 0.6 + run/100, Count: 10},
					TbotSeconds: &schemas.Histogram{Bounds: []float64{1}, Counts: []uint64{10, 0}, Sum: 0.2, Count: 10},
				})
			}
		}
		c, e := "us", "e1"
		if i%3 == 0 {
			c, e = "eu", "e2"
		}
		add(topics.RoutingEvents, c, at, &schemas.RoutingEvent{
			SchemaVersion: schemas.Version, RequestId: fmt.Sprint(i), Cluster: c, EngineId: e, EventTimeUnixMs: at.UnixMilli(),
			Status: schemas.RequestStatus_REQUEST_STATUS_OK, Stream: true, TtftMs: 90, EngineTtftMs: 70, PromptTokens: 300, OutputTokens: 100,
		})
		i++
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
