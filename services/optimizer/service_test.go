package optimizer

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
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

func TestStateInstance(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewState()
	s.Apply(engineEst("b-0", "region-b", 100, now))
	s.Apply(engineEst("c-0", "region-c", 80, now))
	s.Apply(engineEst("stale", "region-c", 80, now.Add(-time.Hour)))
	s.Apply(demandEst("region-b", 120, now))
	s.Apply(demandEst("region-b", 5, now.Add(-time.Minute))) // older window: ignored
	in, eps, err := s.Instance(now, Settings{
		Clusters: []string{"region-c"}, MinDemandRPS: 1,
		RegionRTTms: map[string]map[string]float64{"region-b": {"region-b": 2, "region-c": 40}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Engines) != 2 || len(eps) != 2 || eps["b-0"] != "http://b-0" {
		t.Fatalf("engines %+v endpoints %v", in.Engines, eps)
	}
	if len(in.Clusters) != 2 || in.Clusters[0].ID != "region-b" || in.Clusters[0].DemandRPS != 120 || in.Clusters[1].DemandRPS != 1 {
		t.Fatalf("clusters %+v", in.Clusters)
	}
	if in.RTTms["region-b"]["c-0"] != 40 || in.RTTms["region-c"]["c-0"] != 0 || in.RTTms["region-c"]["b-0"] != 50 {
		t.Fatalf("rtt %v", in.RTTms)
	}
	// e2e(u) = TTFT(u) + 10 tokens × TBOT(u), on the union of knots.
	got := in.Engines[0].LatencyMs
	want := [][2]float64{{0, 200}, {0.5, 400}, {0.9, 1280}, {1, 1300 + 200}}
	if len(got) != len(want) {
		t.Fatalf("profile %v, want %v", got, want)
	}
	for i := range want {
		if math.Abs(got[i][0]-want[i][0]) > 1e-9 || math.Abs(got[i][1]-want[i][1]) > 1e-6 {
			t.Fatalf("profile %v, want %v", got, want)
		}
	}
	if _, _, err := NewState().Instance(now, Settings{}); !errors.Is(err, ErrNothingToPlan) {
		t.Fatalf("empty state: %v", err)
	}
}

func TestPlanDeterministic(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewState()
	s.Apply(engineEst("b-0", "region-b", 100, now))
	s.Apply(engineEst("c-0", "region-c", 80, now))
	s.Apply(demandEst("region-b", 120, now))
	s.Apply(demandEst("region-c", 40, now))
	in, eps, err := s.Instance(now, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Plan(in, eps, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Plan(in, eps, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	a.Stats.SolveMs, b.Stats.SolveMs = 0, 0
	ab, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	bb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	if string(ab) != string(bb) {
		t.Fatal("same instance gave different snapshots")
	}
	for _, cw := range a.GetClusters() {
		sum := cw.GetShedFraction()
		for _, w := range cw.GetWeights() {
			sum += w.GetWeight()
		}
		if math.Abs(sum-1) > 1e-6 {
			t.Fatalf("cluster %s weights sum to %v", cw.GetCluster(), sum)
		}
	}
}

// TestServicePublishesSnapshots runs the service against the real
// embedded Kafka and NATS: estimates in, versioned snapshots out, and a
// malformed estimate dead-lettered.
func TestServicePublishesSnapshots(t *testing.T) {
	kc := testenv.Kafka(t)
	ns := testenv.NATS(t)
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics := streams.TopicsFor("")
	if err := streams.EnsureTopics(ctx, cl, topics, 1); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var recs []*kgo.Record
	for _, e := range []*schemas.Estimate{engineEst("b-0", "region-b", 100, now), engineEst("c-0", "region-c", 80, now), demandEst("region-b", 120, now)} {
		b, _ := proto.Marshal(e)
		recs = append(recs, &kgo.Record{Topic: topics.Estimates, Value: b})
	}
	recs = append(recs, &kgo.Record{Topic: topics.Estimates, Value: []byte{0xff, 0xff, 0xff}})
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{KafkaBrokers: kc.ListenAddrs(), NATSURL: ns.ClientURL(), Period: 100 * time.Millisecond,
		Settings: Settings{Clusters: []string{"region-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	testenv.Eventually(t, 30*time.Second, func() bool { return svc.Stats().SnapshotsPublished >= 3 }, "three snapshots published")
	testenv.Eventually(t, 10*time.Second, func() bool { return svc.Stats().DeadLettered == 1 }, "malformed estimate dead-lettered")

	st, err := snapshots.Open(ctx, testenv.JetStream(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	hist, err := st.History(ctx, "region-b")
	if err != nil {
		t.Fatal(err)
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
