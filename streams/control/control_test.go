package control

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

func profile(pts ...[2]float64) *schemas.LatencyProfile {
	p := &schemas.LatencyProfile{}
	for _, pt := range pts {
		p.Points = append(p.Points, &schemas.ProfilePoint{Utilization: pt[0], LatencyMs: pt[1]})
	}
	return p
}

func engineEst(id, region string, capacity float64, end time.Time) *schemas.Estimate {
	return &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{
		SchemaVersion: schemas.Version, EngineId: id, EndpointUrl: "http://" + id, Region: region, GpuClass: "h100",
		WindowEndUnixMs: end.UnixMilli(), CapacityRps: capacity, Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1,
		TtftProfile: profile([2]float64{0, 100}, [2]float64{0.5, 200}, [2]float64{0.9, 1000}),
		TbotProfile: profile([2]float64{0, 10}, [2]float64{1, 30}),
	}}}
}

func demandEst(cluster string, rps float64, end time.Time) *schemas.Estimate {
	return &schemas.Estimate{Kind: &schemas.Estimate_Demand{Demand: &schemas.DemandEstimate{
		SchemaVersion: schemas.Version, Cluster: cluster, WindowEndUnixMs: end.UnixMilli(), DemandRps: rps, MeanOutputTokens: 10,
	}}}
}

// TestOptimizerPublishesSnapshots runs the loop against the real
// embedded Kafka and NATS: estimates in, versioned snapshots out, and a
// malformed estimate dead-lettered.
func TestOptimizerPublishesSnapshots(t *testing.T) {
	kc := testenv.Kafka(t)
	ns := testenv.NATS(t)
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics := streams.TopicsFor("")
	if err := streams.EnsureTopics(ctx, cl, topics, 1); err != nil {
		t.Fatal(err)
	}
	w1 := time.Now().Truncate(time.Second).Add(-10 * time.Second)
	w2 := w1.Add(2 * time.Second)
	var recs []*kgo.Record
	for _, e := range []*schemas.Estimate{
		engineEst("b-0", "region-b", 100, w1), engineEst("c-0", "region-c", 80, w1), demandEst("region-b", 120, w1),
		engineEst("b-0", "region-b", 100, w2), engineEst("c-0", "region-c", 80, w2), demandEst("region-b", 120, w2),
	} {
		b, _ := proto.Marshal(e)
		recs = append(recs, &kgo.Record{Topic: topics.Estimates, Value: b})
	}
	recs = append(recs, &kgo.Record{Topic: topics.Estimates, Value: []byte{0xff, 0xff, 0xff}})
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	st, err := snapshots.Open(ctx, testenv.JetStream(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ocfg := Config{Settle: 50 * time.Millisecond, Settings: plan.Settings{Clusters: []string{"region-c"}}}
	svc, err := New(testenv.Client(t, kc, ClientOpts(ocfg)...), st, ocfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	testenv.Eventually(t, 30*time.Second, func() bool { return svc.Stats().SnapshotsPublished == 2 }, "a snapshot per window")
	testenv.Eventually(t, 10*time.Second, func() bool { return svc.Stats().DeadLettered == 1 }, "malformed estimate dead-lettered")
	if v := svc.Stats().LatestVersion; v != uint64(w2.UnixMilli()) {
		t.Fatalf("latest version %d, want the second window's end %d", v, w2.UnixMilli())
	}

	hist, err := st.History(ctx, "region-b")
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 {
		t.Fatalf("history holds %d snapshots, want 2", len(hist))
	}
	for i := 1; i < len(hist); i++ {
		if hist[i].GetVersion() <= hist[i-1].GetVersion() {
			t.Fatalf("versions not increasing: %d then %d", hist[i-1].GetVersion(), hist[i].GetVersion())
		}
	}
	snap := hist[len(hist)-1]
	cw := snap.GetClusters()[0]
	var toC float64
	for _, w := range cw.GetWeights() {
		if w.GetEngineId() == "c-0" {
			toC = w.GetWeight()
		}
		if w.GetEndpointUrl() == "" {
			t.Fatalf("weight without endpoint: %v", w)
		}
	}
	if toC <= 0 {
		t.Fatalf("region-b (120 rps onto a 100 rps local engine) sends nothing to c-0: %v", cw)
	}
	if snap.GetInputsDigest() == "" {
		t.Fatal("no inputs digest")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestNewRefuses checks New's errors: no client, a client that does not
// consume the estimates topic, no store.
func TestNewRefuses(t *testing.T) {
	kc := testenv.Kafka(t)
	ns := testenv.NATS(t)
	st, err := snapshots.Open(context.Background(), testenv.JetStream(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{TopicPrefix: "p"}
	for _, tc := range []struct {
		name  string
		cl    *kgo.Client
		store Store
	}{
		{"no client", nil, st},
		{"client without the estimates topic", testenv.Client(t, kc), st},
		{"client of another prefix", testenv.Client(t, kc, ClientOpts(Config{})...), st},
		{"no store", testenv.Client(t, kc, ClientOpts(cfg)...), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cl, tc.store, cfg); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}
