package optimizer

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

func TestCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--region-rtt", "a=4"},
		{"--no-such-flag"},
		{"--kafka-brokers", " ", "--nats-url", "nats://127.0.0.1:4222"},
		{"--kafka-brokers", "127.0.0.1:9092", "--nats-url", ""},
		{"--kafka-brokers", "127.0.0.1:9092", "--nats-url", "nats://127.0.0.1:4222", "--snapshot-compression", "zstd"},
	} {
		err := Command().Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}

func TestParseRTT(t *testing.T) {
	m, err := ParseRTT("a:b=40, b:a=12.5,")
	if err != nil || m["a"]["b"] != 40 || m["b"]["a"] != 12.5 || len(m) != 2 {
		t.Fatalf("got %v, %v", m, err)
	}
	for _, bad := range []string{"a=4", "a:b=x", "a:b=-1", ":b=1", "a:=1", "a:b=NaN"} {
		if _, err := ParseRTT(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestCommandPublishes runs the command on real brokers: an engine and a
// demand estimate in, a snapshot of the cluster out, which a gateway
// (its watcher and ApplySnapshot) applies; with --snapshot-compression s2
// the stored value is the compressed form.
func TestCommandPublishes(t *testing.T) {
	for _, c := range []string{snapshots.CompressionNone, snapshots.CompressionS2} {
		t.Run(c, func(t *testing.T) { testCommandPublishes(t, c) })
	}
}

func testCommandPublishes(t *testing.T, compression string) {
	kc := testenv.Kafka(t)
	ns := testenv.NATS(t)
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics := streams.TopicsFor("")
	if err := streams.EnsureTopics(ctx, cl, topics, 1); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Truncate(time.Second).UnixMilli()
	prof := &schemas.LatencyProfile{Points: []*schemas.ProfilePoint{{Utilization: 0, LatencyMs: 100}, {Utilization: 0.9, LatencyMs: 500}}}
	var recs []*kgo.Record
	for _, e := range []*schemas.Estimate{
		{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{SchemaVersion: schemas.Version, EngineId: "e1",
			EndpointUrl: "http://e1", Region: "r1", GpuClass: "h100", WindowEndUnixMs: end, CapacityRps: 50,
			Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1, TtftProfile: prof, TbotProfile: prof}}},
		{Kind: &schemas.Estimate_Demand{Demand: &schemas.DemandEstimate{SchemaVersion: schemas.Version, Cluster: "r1",
			WindowEndUnixMs: end, DemandRps: 10, MeanOutputTokens: 10}}},
	} {
		b, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topics.Estimates, Value: b})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() {
		done <- Command().Run(runCtx, []string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--nats-url", ns.ClientURL(),
			"--metrics-listen", "", "--settle", "50ms", "--clusters", "r1", "--snapshot-compression", compression}, &bytes.Buffer{}, &stderr)
	}()
	js := testenv.JetStream(t, ns)
	st, err := snapshots.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		snap, err := st.Get(ctx, "r1")
		return err == nil && snap.GetVersion() == uint64(end)
	}, "the command published the window's snapshot")
	kv, err := js.KeyValue(ctx, snapshots.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got := bytes.HasPrefix(e.Value(), snapshots.ValueMagic); got != (compression == snapshots.CompressionS2) {
		t.Fatalf("--snapshot-compression %s: stored value compressed %v", compression, got)
	}
	g, err := gateway.New("r1", gateway.HealthInterval(-1), gateway.Registerer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	w := snapshots.NewWatcher(ns.ClientURL(), "", "r1")
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- w.Run(wctx) }()
	select {
	case b := <-w.Updates():
		if err := g.ApplySnapshot(b); err != nil || g.Stats().SnapshotVersion != uint64(end) {
			t.Fatalf("the gateway applied version %d: %v", g.Stats().SnapshotVersion, err)
		}
	case <-ctx.Done():
		t.Fatal("the watcher delivered nothing")
	}
	stopWatch()
	if err := <-watched; err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
}
