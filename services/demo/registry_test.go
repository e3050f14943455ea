package demo

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/internal/brokers"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// TestDemoRefusesUnregisteredEngines: the demo's pipeline (its agents,
// processor, optimizer and gateway on its embedded brokers, no load) is
// secure by default. Signals published to its Kafka with an agent's
// reach, for a new engine e9 at an attacker's endpoint and for one of
// its engines at the attacker's endpoint, are dead-lettered with reasons
// unregistered_engine and endpoint_mismatch; every snapshot the
// optimizer publishes after them names only the demo's engines at their
// own addresses; and a snapshot naming e9 put to a gateway is refused.
func TestDemoRefusesUnregisteredEngines(t *testing.T) {
	if testing.Short() {
		t.Skip("demo pipeline skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b, err := brokers.Start(ctx, brokers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	kafka, topics := b.KafkaAddrs(), streams.TopicsFor("")
	if err := ensureTopics(ctx, kafka, topics); err != nil {
		t.Fatal(err)
	}
	const region = "region-a"
	cfg := Config{
		Topology: Topology{
			Regions: []string{region},
			Engines: []EngineSpec{{ID: "a-h100-0", Region: region, GPUClass: "h100"}, {ID: "a-l4-0", Region: region, GPUClass: "l4"}},
			RTTms:   map[string]map[string]float64{region: {region: 1}},
		},
		GatewayListen: "127.0.0.1:0", Model: "m", Seed: 1, Logger: slog.New(slog.DiscardHandler),
	}
	compCtx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(compCtx)
	defer func() {
		stop()
		if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("components: %v", err)
		}
	}()
	reg := prometheus.NewRegistry()
	engines, err := startEngines(gctx, g, cfg, reg, cfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	pipe, err := startPipeline(gctx, g, cfg, engines, kafka, b.NATSURL(), reg, cfg.Logger)
	if err != nil {
		t.Fatal(err)
	}
	real := map[string]string{}
	for _, e := range engines {
		real[e.spec.ID] = fleet.Normalize(e.url)
	}
	const attacker = "http://127.0.0.1:1"

	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka...), kgo.ConsumeTopics(topics.DeadLetter),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	publish := func() {
		t.Helper()
		now := time.Now()
		for _, s := range []*schemas.EngineSignal{
			attack("e9", attacker, now),               // a new engine
			attack(engines[0].spec.ID, attacker, now), // a registered engine moved
		} {
			v, err := proto.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			rec := &kgo.Record{Topic: topics.Signals, Key: []byte(s.GetEngineId()), Value: v, Headers: streams.ProtoHeaders(s)}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Publish the attack every half second until both kinds are
	// dead-lettered (the processor reads the signals topic from its end
	// when it first joins) and the optimizer has published two snapshots
	// since the first dead-letter.
	want := map[string]string{"e9": fleet.ErrUnregistered.Error(), engines[0].spec.ID: fleet.ErrEndpoint.Error()}
	seen := map[string]bool{}
	var since uint64
	for !(len(seen) == len(want) && pipe.snapshotsPublished() >= since+2) {
		if ctx.Err() != nil {
			t.Fatalf("dead-lettered %v, snapshots published %d (want %d): %v", seen, pipe.snapshotsPublished(), since+2, ctx.Err())
		}
		publish()
		fctx, fcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(fctx)
		fcancel()
		fs.EachRecord(func(r *kgo.Record) {
			id := string(r.Key)
			reason, _, _ := strings.Cut(streams.Reason(r), ":") // the code, then the detail
			if want[id] != "" && reason == want[id] && !seen[id] {
				if len(seen) == 0 {
					since = pipe.snapshotsPublished()
				}
				seen[id] = true
			} else if want[id] != "" && reason != want[id] {
				t.Errorf("signal for %s dead-lettered as %q, want %q", id, reason, want[id])
			}
		})
	}
	if st := pipe.processor.Stats(); st.DeadLettered < 2 {
		t.Errorf("processor dead-lettered %d", st.DeadLettered)
	}

	nc, err := nats.Connect(b.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := snapshots.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	planned := 0
	if err := store.ReadAudit(ctx, snapshots.AuditFrom{}, func(a snapshots.AuditEntry) bool {
		if a.Err != nil {
			t.Errorf("audit %d: %v", a.Seq, a.Err)
			return true
		}
		for _, c := range a.Snapshot.GetClusters() {
			for _, w := range c.GetWeights() {
				planned++
				if url, ok := real[w.GetEngineId()]; !ok || fleet.Normalize(w.GetEndpointUrl()) != url {
					t.Errorf("snapshot v%d plans %s at %s", a.Snapshot.GetVersion(), w.GetEngineId(), w.GetEndpointUrl())
				}
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if planned == 0 {
		t.Fatal("no engine planned in any snapshot: the check shows nothing")
	}

	// A snapshot naming e9, put straight to the gateway, is refused.
	gw := pipe.gateways[0].svc
	snap, err := proto.Marshal(&schemas.WeightSnapshot{SchemaVersion: 1, Version: pipe.latestVersion() + 1, CreatedUnixMs: time.Now().UnixMilli(),
		Clusters: []*schemas.ClusterWeights{{Cluster: region, Weights: []*schemas.EngineWeight{{EngineId: "e9", EndpointUrl: attacker, Weight: 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.ApplySnapshot(snap); !errors.Is(err, gateway.ErrSnapshotUnregistered) {
		t.Errorf("gateway applied a snapshot naming e9: %v", err)
	}
	t.Logf("dead-lettered %v; %d engine weights in the audit, none outside the registry", seen, planned)
}

// attack is a healthy engine signal claiming much free capacity and a
// fast first token, as an attacker with an agent's credentials would
// publish it.
func attack(id, url string, at time.Time) *schemas.EngineSignal {
	const finished = 100
	return &schemas.EngineSignal{
		SchemaVersion: schemas.Version, EngineId: id, EndpointUrl: url, Region: "region-a", GpuClass: "h100",
		EventTimeUnixMs: at.UnixMilli(), ReadyReplicas: 1, Health: schemas.Health_HEALTH_HEALTHY,
		IntervalSeconds: 1, RequestsFinished: finished, MaxBatch: 1000, MaxBatchSource: "configured",
		TtftSeconds: &schemas.Histogram{Bounds: []float64{0.001, 1}, Counts: []uint64{finished, 0, 0}, Sum: finished * 0.0005, Count: finished},
	}
}
