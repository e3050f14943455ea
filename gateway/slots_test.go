package gateway

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/admit"
	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/schemas"
)

// limitOf returns the concurrency limit the gateway set on engine id.
func limitOf(t *testing.T, g *Gateway, id string) int64 {
	t.Helper()
	tb := g.cur.Load().table
	for i := 0; i < tb.Len(); i++ {
		if e := tb.Engine(i); e.ID == id {
			return e.State.Limit()
		}
	}
	t.Fatalf("engine %s not in the table", id)
	return 0
}

// TestBatchLimitHoldsWhateverTheLatency: an engine whose batch limit
// the snapshot gives keeps a limit of its slots and a quarter however
// its requests' TTFT varies (prompt sizes that span two orders of
// magnitude look like queueing to a latency gradient), so the gateway
// never holds it below its free slots.
func TestBatchLimitHoldsWhateverTheLatency(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g, err := New("c", HealthInterval(-1), Clock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	s := fullSnapshot(1, 2)
	s.Clusters[1].Weights[0].Explanation.MaxConcurrency = 8
	if err := g.ApplySnapshot(marshal(t, s)); err != nil {
		t.Fatal(err)
	}
	e := g.cur.Load().table.Engine(0)
	for round := range 20 {
		for k := range 16 { // 40 ms to 4 s, the later windows slower
			ttft := time.Duration(40*(1+k*k*(round%4+1)/2)) * time.Millisecond
			g.admit.sample(e, &attemptResult{firstToken: true, ttft: ttft}, now.Add(-time.Second), now, 0)
		}
		g.admit.limiter(e.State, 0).Limiter().Drop(now.Add(-time.Second))
		now = now.Add(250 * time.Millisecond)
		g.tickAdmission()
		if got := limitOf(t, g, e.ID); got != 10 {
			t.Fatalf("round %d: limit %d, want 8 slots + 2", round, got)
		}
	}
}

// TestSignalBatchLimit: with no batch limit in the snapshot, the
// engine's signals give it: the max_batch it advertises over its ready
// replicas, else the most it ran while requests waited in its own queue;
// a signal that says it is down forgets it.
func TestSignalBatchLimit(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g, err := New("c", HealthInterval(-1), Clock(func() time.Time { return now }), MaxInFlightPerEngine(1000))
	if err != nil {
		t.Fatal(err)
	}
	s := fullSnapshot(1, 2)
	for _, w := range s.Clusters[1].Weights {
		w.Explanation.MaxConcurrency = 0
	}
	if err := g.ApplySnapshot(marshal(t, s)); err != nil {
		t.Fatal(err)
	}
	signal := func(sig *schemas.EngineSignal) {
		t.Helper()
		sig.EngineId, sig.EventTimeUnixMs = "e-000", now.UnixMilli()
		g.applySignal(marshal(t, sig))
		g.tickAdmission()
	}
	unknown := limitOf(t, g, "e-000") // the limiter's, capped at 1000
	if unknown != int64(admit.NewLimiter(admit.Config{}, 0).Limit()) {
		t.Fatalf("no batch limit known: limit %d, want the limiter's initial", unknown)
	}
	cases := []struct {
		name string
		sig  *schemas.EngineSignal
		want int64
	}{
		{"running without a queue tells nothing", &schemas.EngineSignal{Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1, RunningRequests: 5}, unknown},
		{"running while requests wait", &schemas.EngineSignal{Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1, RunningRequests: 6, WaitingRequests: 3}, 6 + 1},
		{"fewer running later keeps the most", &schemas.EngineSignal{Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 1, RunningRequests: 4, WaitingRequests: 1}, 6 + 1},
		{"max_batch over ready replicas", &schemas.EngineSignal{Health: schemas.Health_HEALTH_HEALTHY, ReadyReplicas: 2, MaxBatch: 8}, 16 + 4},
		{"down forgets", &schemas.EngineSignal{Health: schemas.Health_HEALTH_UNHEALTHY, MaxBatch: 8}, unknown},
	}
	for _, c := range cases {
		signal(c.sig)
		if got := limitOf(t, g, "e-000"); got != c.want {
			t.Fatalf("%s: limit %d, want %d", c.name, got, c.want)
		}
	}
}

// TestHeldBelowBatchLimitIsReported: a gateway whose
// --max-in-flight-per-engine holds an engine below its batch limit,
// with that many requests in flight there while the engine's signals
// show nothing waiting in its own queue, reports it (and its end), so
// that degrade can warn; an engine with a queue of its own is not held.
func TestHeldBelowBatchLimitIsReported(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g, err := New("c", HealthInterval(-1), Clock(func() time.Time { return now }), MaxInFlightPerEngine(2))
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	g.admit.onHeld = func(engine string, held bool) { got = append(got, held) }
	s := fullSnapshot(1, 1)
	s.Clusters[1].Weights[0].Explanation.MaxConcurrency = 8
	if err := g.ApplySnapshot(marshal(t, s)); err != nil {
		t.Fatal(err)
	}
	tb := g.cur.Load().table
	signal := func(waiting float64) {
		sig := &schemas.EngineSignal{EngineId: "e-000", EventTimeUnixMs: now.UnixMilli(), Health: schemas.Health_HEALTH_HEALTHY,
			ReadyReplicas: 1, MaxBatch: 8, RunningRequests: 2, WaitingRequests: waiting}
		g.applySignal(marshal(t, sig))
		g.tickAdmission()
	}
	signal(0)
	if len(got) != 0 {
		t.Fatalf("nothing in flight: reported %v", got)
	}
	for range 2 {
		if i, _, _ := tb.PickRequest(&pick.Request{Key: 1}, nil); i != 0 {
			t.Fatalf("pick %d", i)
		}
	}
	signal(0)
	if len(got) != 1 || !got[0] {
		t.Fatalf("at the cap of 2 below 8 slots with no engine queue: reported %v, want held", got)
	}
	signal(3)
	if len(got) != 2 || got[1] {
		t.Fatalf("with requests waiting at the engine: reported %v, want no longer held", got)
	}
}

// TestProbeRaisesALimitThatBindsOnAnIdleEngine: a snapshot may give an
// engine its GPU class peers' batch limit until its own shows. When
// that limit binds (the gateway has requests queued and the limit's
// worth in flight on the engine) while the engine's signals show no
// queue of its own, each new signal raises the limit by a quarter of the
// known batch; once requests wait at the engine, its signals give the
// real batch limit and the probe ends.
func TestProbeRaisesALimitThatBindsOnAnIdleEngine(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g, err := New("c", HealthInterval(-1), Clock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	s := fullSnapshot(1, 1)
	s.Clusters[1].Weights[0].Explanation.MaxConcurrency = 4 // its class peers'
	if err := g.ApplySnapshot(marshal(t, s)); err != nil {
		t.Fatal(err)
	}
	tb := g.cur.Load().table
	signal := func(running, waiting float64) {
		sig := &schemas.EngineSignal{EngineId: "e-000", EventTimeUnixMs: now.UnixMilli(), Health: schemas.Health_HEALTH_HEALTHY,
			ReadyReplicas: 1, RunningRequests: running, WaitingRequests: waiting}
		g.applySignal(marshal(t, sig))
	}
	tick := func(want int64, what string) {
		t.Helper()
		g.tickAdmission()
		if got := limitOf(t, g, "e-000"); got != want {
			t.Fatalf("%s: limit %d, want %d", what, got, want)
		}
	}
	tick(5, "4 slots from the snapshot")
	for range 20 { // slots freed lately, so that a request can queue
		if err := g.admit.q.Offer(admit.Request{Priority: 1}, nil); err != nil {
			t.Fatal(err)
		}
		g.admit.q.Release(admit.Request{Priority: 1})
	}
	for range 5 {
		if err := g.admit.q.Offer(admit.Request{Priority: 1}, nil); err != nil {
			t.Fatal(err)
		}
		if i, _, _ := tb.PickRequest(&pick.Request{Key: 1}, nil); i != 0 {
			t.Fatalf("pick %d", i)
		}
	}
	signal(5, 0)
	tick(5, "nothing queued at the gateway")
	if err := g.admit.q.Offer(admit.Request{Priority: 1}, func(error) {}); err != admit.ErrQueued {
		t.Fatalf("offer: %v, want it queued", err)
	}
	tick(6, "bound on an idle engine: a quarter more")
	// The queued request was admitted to the new slot: it binds again.
	if i, _, _ := tb.PickRequest(&pick.Request{Key: 1}, nil); i != 0 {
		t.Fatalf("pick %d", i)
	}
	if err := g.admit.q.Offer(admit.Request{Priority: 1}, func(error) {}); err != admit.ErrQueued {
		t.Fatalf("offer: %v, want it queued", err)
	}
	tick(6, "no new signal: no new probe")
	signal(6, 0)
	tick(7, "bound again after a new signal")
	signal(7, 2)
	tick(8, "requests wait at the engine: its 7 slots and a quarter")
	signal(8, 1)
	tick(10, "requests wait at the engine: its 8 slots and a quarter")
	for range 4 { // binding again, but the engine has a queue: no probe
		if i, _, _ := tb.PickRequest(&pick.Request{Key: 1}, nil); i != 0 {
			t.Fatalf("pick %d", i)
		}
	}
	for g.admit.q.Offer(admit.Request{Priority: 1}, func(error) {}) == nil { // fill the gateway's slots, then queue one
	}
	signal(8, 1)
	tick(10, "bound while requests wait at the engine: its 8 slots and a quarter, no probe")
}
