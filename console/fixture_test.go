package console

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// The fixture is a small pipeline's output on real brokers: an embedded
// NATS holding snapshots (KV and audit stream) and a kfake Kafka holding
// estimates, signals and routing events, as the processor, agents and
// gateways write them, for two clusters and three engines.

type fixtureEngine struct {
	id, region, gpu string
	capacity        float64
	baseTTFT        float64 // ms at zero load
	baseTBOT        float64
}

var fixtureEngines = []fixtureEngine{
	{"a-h100-0", "region-a", "h100", 40, 60, 12},
	{"a-a100-1", "region-a", "a100", 25, 90, 18},
	{"b-l4-0", "region-b", "l4", 10, 140, 30},
}

const (
	fixtureSnapshots = 6
	fixtureSignals   = 40 // per engine
	fixtureEvents    = 90 // per cluster
	fixtureErrors    = 6  // region-a's failed requests
	fixtureShed      = 9  // region-b's requests rejected by admission
)

type fixture struct {
	console  *Console
	server   *httptest.Server
	versions []uint64
	now      time.Time
}

// newFixture starts the brokers, writes the pipeline's output, starts a
// console on them and waits until it has read every record.
// opts adjust the console's configuration.
func newFixture(t testing.TB, opts ...func(*Config)) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ns := testenv.NATS(t)
	js := testenv.JetStream(t, ns)
	store, err := snapshots.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f := &fixture{now: now}
	// One snapshot every 2 s up to now: weights move from the A100 to
	// the H100; region-b sheds once its demand passes capacity.
	for i := range fixtureSnapshots {
		v := uint64(now.Add(-time.Duration(fixtureSnapshots-i) * 2 * time.Second).UnixMilli())
		if err := store.Publish(ctx, fixtureSnapshot(v, i)); err != nil {
			t.Fatal(err)
		}
		f.versions = append(f.versions, v)
	}

	kc := testenv.Kafka(t)
	prod := testenv.Client(t, kc)
	topics := streams.TopicsFor("")
	if err := streams.EnsureTopics(ctx, prod, topics, 1); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	add := func(topic string, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Value: b})
	}
	winEnd := now.Add(-time.Second).UnixMilli()
	for _, e := range fixtureEngines {
		var ttftObs, tbotObs []estimate.Obs
		for j := range fixtureSignals {
			s := fixtureSignal(e, j, now.Add(-time.Duration(fixtureSignals-j)*time.Second).UnixMilli())
			add(topics.Signals, s)
			if o, ok := estimate.SignalObs(s, estimate.TTFT); ok {
				ttftObs = append(ttftObs, o)
			}
			if o, ok := estimate.SignalObs(s, estimate.TBOT); ok {
				tbotObs = append(tbotObs, o)
			}
		}
		add(topics.Estimates, &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{
			SchemaVersion: schemas.Version, EngineId: e.id, EndpointUrl: "http://127.0.0.1:1/" + e.id, Region: e.region, GpuClass: e.gpu,
			WindowStartUnixMs: winEnd - 10_000, WindowEndUnixMs: winEnd, CapacityRps: e.capacity, Health: schemas.Health_HEALTH_HEALTHY,
			ReadyReplicas: 2, KvCacheUsage: 0.3, PrefixHitRate: 0.4, ObservedRps: e.capacity / 2, Utilization: 0.5,
			TtftProfile: estimate.ConvexFit(ttftObs, e.gpu, estimate.TTFT), TbotProfile: estimate.ConvexFit(tbotObs, e.gpu, estimate.TBOT),
			SignalCount: fixtureSignals, MaxBatch: 16, CapacitySource: "configured", CacheResidencyS: 37.5,
		}}})
	}
	for _, c := range []string{"region-a", "region-b"} {
		add(topics.Estimates, &schemas.Estimate{Kind: &schemas.Estimate_Demand{Demand: &schemas.DemandEstimate{
			SchemaVersion: schemas.Version, Cluster: c, WindowStartUnixMs: winEnd - 10_000, WindowEndUnixMs: winEnd, DemandRps: 1.5, ForecastRps: 1.6,
		}}})
		for j := range fixtureEvents {
			ev := &schemas.RoutingEvent{SchemaVersion: schemas.Version, RequestId: fmt.Sprint(j), Cluster: c, EngineId: fixtureEngines[j%2].id,
				Status: schemas.RequestStatus_REQUEST_STATUS_OK, TtftMs: 80, EventTimeUnixMs: now.Add(-time.Duration(fixtureEvents-j) * time.Second).UnixMilli(),
				// Two gateways per cluster: gw-0 routes on the latest
				// snapshot, gw-1 on the one before.
				GatewayId: fmt.Sprintf("%s-gw-%d", c, j%2), SnapshotVersion: f.versions[len(f.versions)-1-j%2]}
			switch {
			case c == "region-a" && j%(fixtureEvents/fixtureErrors) == 0:
				ev.Status = schemas.RequestStatus_REQUEST_STATUS_ERROR
			case c == "region-b" && j%(fixtureEvents/fixtureShed) == 0:
				ev.Status, ev.EngineId = schemas.RequestStatus_REQUEST_STATUS_SHED, ""
				ev.FailureReason = schemas.FailureReason_FAILURE_REASON_SHED_ADMISSION
			}
			add(topics.RoutingEvents, ev)
		}
	}
	recs = append(recs, &kgo.Record{Topic: topics.Signals, Value: []byte("not a signal")})
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// The processor's group is 20 signals behind.
	var commit kadm.Offsets
	commit.Add(kadm.Offset{Topic: topics.Signals, Partition: 0, At: int64(len(fixtureEngines)*fixtureSignals - 20), LeaderEpoch: -1})
	commit.Add(kadm.Offset{Topic: topics.RoutingEvents, Partition: 0, At: 2 * fixtureEvents, LeaderEpoch: -1})
	if err := kadm.NewClient(prod).CommitAllOffsets(ctx, "switchyard-processor", commit); err != nil {
		t.Fatal(err)
	}
	// A team's group is 80 routing events behind.
	var team kadm.Offsets
	team.Add(kadm.Offset{Topic: topics.RoutingEvents, Partition: 0, At: 2*fixtureEvents - 80, LeaderEpoch: -1})
	if err := kadm.NewClient(prod).CommitAllOffsets(ctx, "team-analytics", team); err != nil {
		t.Fatal(err)
	}

	cfg := Config{Snapshots: store, Refresh: -1, Now: func() time.Time { return now.Add(time.Second) }}
	for _, o := range opts {
		o(&cfg)
	}
	cl := testenv.Client(t, kc, ClientOpts(cfg)...)
	cfg.Kafka = cl
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	want := counts{Estimates: uint64(len(fixtureEngines) + 2), Signals: uint64(len(fixtureEngines) * fixtureSignals),
		RoutingEvents: 2 * fixtureEvents, Invalid: 1}
	testenv.Eventually(t, 15*time.Second, func() bool { return c.live.pipeline().Counts == want }, "console did not read every record")
	f.console = c
	f.server = httptest.NewServer(c.Handler())
	t.Cleanup(f.server.Close)
	return f
}

// fixtureSnapshot is snapshot i of the fixture.
func fixtureSnapshot(v uint64, i int) *schemas.WeightSnapshot {
	h := 0.5 + 0.08*float64(i)
	shed := math.Max(0, 0.05*float64(i-2))
	explain := func(netMs, engMs float64, bind ...string) *schemas.Explanation {
		return &schemas.Explanation{NetworkMs: netMs, EngineMs: engMs, MarginalMs: netMs + engMs + 20, Binding: bind, MaxBatch: 16, CapacitySource: "configured", CacheResidencyS: 37.5}
	}
	return &schemas.WeightSnapshot{
		SchemaVersion: schemas.Version, Version: v, CreatedUnixMs: int64(v) + 40, InputsDigest: fmt.Sprintf("%064x", v),
		Stats: &schemas.SolveStats{Solver: "newton", ObjectiveMs: 210 + float64(i), DualityGap: 1e-7, Iterations: 12, SolveMs: 0.8, TotalShedRps: shed * 3},
		Clusters: []*schemas.ClusterWeights{
			{Cluster: "region-a", DemandRps: 20, ExpectedLatencyMs: 95 - float64(i), Weights: []*schemas.EngineWeight{
				{EngineId: "a-h100-0", EndpointUrl: "http://127.0.0.1:1/a-h100-0", Weight: h, PlannedUtilization: 0.6, Explanation: explain(1, 70)},
				{EngineId: "a-a100-1", EndpointUrl: "http://127.0.0.1:1/a-a100-1", Weight: 1 - h, PlannedUtilization: 0.4, Explanation: explain(1, 95)},
			}, ModelWeights: []*schemas.ModelWeights{{Model: "llama-sql", DemandRps: 4, ShedFraction: 0.05, Weights: []*schemas.EngineWeight{
				{EngineId: "a-h100-0", EndpointUrl: "http://127.0.0.1:1/a-h100-0", Weight: 0.95, PlannedUtilization: 0.6, Explanation: explain(1, 70)},
			}}}},
			{Cluster: "region-b", DemandRps: 3, ShedFraction: shed, ExpectedLatencyMs: 160, DemandEstimate: &schemas.DemandEstimate{
				SchemaVersion: schemas.Version, Cluster: "region-b", WindowStartUnixMs: int64(v) - 30_000, WindowEndUnixMs: int64(v),
				DemandRps: 1.5, ForecastRps: 1.6, RequestCount: 45, RejectedCount: 9, ShedSnapshotCount: 3, ShedAdmissionCount: 5,
			}, Weights: []*schemas.EngineWeight{
				{EngineId: "b-l4-0", EndpointUrl: "http://127.0.0.1:1/b-l4-0", Weight: 0.9 - shed, PlannedUtilization: 0.9, Explanation: explain(1, 150, "capacity")},
				{EngineId: "a-h100-0", EndpointUrl: "http://127.0.0.1:1/a-h100-0", Weight: 0.1, PlannedUtilization: 0.6, Explanation: explain(40, 70)},
			}},
		},
	}
}

// fixtureSignal is engine e's signal j: load rises and falls, latency
// grows convexly with it.
func fixtureSignal(e fixtureEngine, j int, ms int64) *schemas.EngineSignal {
	u := 0.1 + 0.8*math.Abs(math.Sin(float64(j)/7))
	running := u * 16 * 2
	n := uint64(3 + j%5)
	ttft := e.baseTTFT * (1 + 1.5*u*u) * (1 + 0.05*math.Sin(float64(j)))
	tbot := e.baseTBOT * (1 + 0.8*u*u)
	return &schemas.EngineSignal{
		SchemaVersion: schemas.Version, EngineId: e.id, EndpointUrl: "http://127.0.0.1:1/" + e.id, Region: e.region, GpuClass: e.gpu,
		EventTimeUnixMs: ms, ReadyReplicas: 2, Health: schemas.Health_HEALTH_HEALTHY, RunningRequests: running, KvCacheUsage: u / 2,
		IntervalSeconds: 1, RequestsFinished: float64(n), MaxBatch: 16, MaxBatchSource: "configured",
		TtftSeconds: &schemas.Histogram{Count: n, Sum: float64(n) * ttft / 1000},
		TbotSeconds: &schemas.Histogram{Count: n * 20, Sum: float64(n*20) * tbot / 1000},
	}
}

// get fetches path from the fixture's console.
func (f *fixture) get(t testing.TB, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(f.server.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
