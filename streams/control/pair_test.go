package control

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// TestOptimizerPair runs two optimizers on the same estimates and
// snapshot bucket, as deploy/k8s runs its active/standby pair: both plan
// every window, each cluster's key takes each version once (the replicas
// plan the same bytes, and the later write is a no-op), and when one
// stops the other publishes the next window.
func TestOptimizerPair(t *testing.T) {
	kc := testenv.Kafka(t)
	ns := testenv.NATS(t)
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics := streams.TopicsFor("")
	if err := streams.EnsureTopics(ctx, cl, topics, 1); err != nil {
		t.Fatal(err)
	}
	produceWindow := func(end time.Time) {
		t.Helper()
		var recs []*kgo.Record
		for _, e := range []*schemas.Estimate{engineEst("b-0", "region-b", 100, end), engineEst("c-0", "region-c", 80, end), demandEst("region-b", 120, end)} {
			b, _ := proto.Marshal(e)
			recs = append(recs, &kgo.Record{Topic: topics.Estimates, Value: b})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	type replica struct {
		o    *Optimizer
		m    *prometheus.Registry
		stop context.CancelFunc
		done chan error
	}
	start := func() replica {
		st, err := snapshots.Open(ctx, testenv.JetStream(t, ns))
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		cfg := Config{Settle: 50 * time.Millisecond, Settings: plan.Settings{Clusters: []string{"region-b", "region-c"}}, Registerer: reg}
		o, err := New(testenv.Client(t, kc, ClientOpts(cfg)...), st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		r := replica{o: o, m: reg, stop: stop, done: make(chan error, 1)}
		go func() { r.done <- o.Run(rctx) }()
		return r
	}
	// Both run before the estimates arrive, so each plans both windows: a
	// malformed record, dead-lettered by both, shows they are consuming.
	a, b := start(), start()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Estimates, Value: []byte{0xff, 0xff, 0xff}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return a.o.Stats().DeadLettered == 1 && b.o.Stats().DeadLettered == 1 }, "both replicas consuming")
	w1 := time.Now().Truncate(time.Second).Add(-10 * time.Second)
	produceWindow(w1)
	produceWindow(w1.Add(2 * time.Second))
	published := func() uint64 { return a.o.Stats().SnapshotsPublished + b.o.Stats().SnapshotsPublished }
	refused := func() float64 { return publishFailures(t, a.m) + publishFailures(t, b.m) }
	testenv.Eventually(t, 30*time.Second, func() bool { return published()+uint64(refused()) == 4 },
		"both replicas tried to publish both windows")
	// Each cluster's key took each version once, from whichever replica
	// wrote it first (a replica can win one cluster and lose the other).
	st, err := snapshots.Open(ctx, testenv.JetStream(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	w2 := uint64(w1.Add(2 * time.Second).UnixMilli())
	for _, c := range []string{"region-b", "region-c"} {
		snap, err := st.Get(ctx, c)
		if err != nil || snap.GetVersion() != w2 {
			t.Fatalf("%s holds version %d (%v), want the second window's %d", c, snap.GetVersion(), err, w2)
		}
	}
	if refused() != 0 {
		t.Fatalf("%v publishes refused: the replicas planned different snapshots for the same window", refused())
	}
	for _, c := range []string{"region-b", "region-c"} {
		h, err := st.History(ctx, c)
		if err != nil || len(h) != 2 || h[0].GetVersion() != uint64(w1.UnixMilli()) || h[1].GetVersion() != w2 {
			t.Fatalf("%s history %d values (%v), want each window's version once", c, len(h), err)
		}
	}

	// The active one (or either) stops; the other publishes the next window.
	a.stop()
	if err := <-a.done; err != nil {
		t.Fatal(err)
	}
	before := b.o.Stats().SnapshotsPublished
	w3 := w1.Add(4 * time.Second)
	produceWindow(w3)
	testenv.Eventually(t, 30*time.Second, func() bool { return b.o.Stats().SnapshotsPublished == before+1 }, "the remaining replica published the next window alone")
	if v := b.o.Stats().LatestVersion; v != uint64(w3.UnixMilli()) {
		t.Fatalf("latest version %d, want the third window's end %d", v, w3.UnixMilli())
	}
	b.stop()
	if err := <-b.done; err != nil {
		t.Fatal(err)
	}
}

// publishFailures reads switchyard_optimizer_failures_total{stage="publish"}.
func publishFailures(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_optimizer_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" && l.GetValue() == "publish" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
