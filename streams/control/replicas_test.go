package control

import (
	"context"
	"slices"
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

// TestReplicasOneKilledEveryWindowOnce runs two optimizer replicas on the
// same estimates and bucket and stops one mid-run (its context cancelled
// right after a window's estimates are produced, so it may be planning
// or half-way through publishing it). Every window still gets exactly
// one snapshot version: each cluster's key history and the audit stream
// list each window's version once, in order, none missing.
func TestReplicasOneKilledEveryWindowOnce(t *testing.T) {
	kc := testenv.Kafka(t)
	ns := testenv.NATS(t)
	cl := testenv.Client(t, kc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics := streams.TopicsFor("")
	if err := streams.EnsureTopics(ctx, cl, topics, 1); err != nil {
		t.Fatal(err)
	}
	clusters := []string{"region-b", "region-c"}
	st, err := snapshots.Open(ctx, testenv.JetStream(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	type replica struct {
		o    *Optimizer
		stop context.CancelFunc
		done chan error
	}
	start := func() replica {
		rst, err := snapshots.Open(ctx, testenv.JetStream(t, ns))
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Settle: 50 * time.Millisecond, Settings: plan.Settings{Clusters: clusters}}
		o, err := New(testenv.Client(t, kc, ClientOpts(cfg)...), rst, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		r := replica{o: o, stop: stop, done: make(chan error, 1)}
		go func() { r.done <- o.Run(rctx) }()
		return r
	}
	a, b := start(), start()
	defer b.stop()
	holds := func(v uint64) bool {
		for _, c := range clusters {
			if snap, err := st.Get(ctx, c); err != nil || snap.GetVersion() < v {
				return false
			}
		}
		return true
	}
	w0 := time.Now().Truncate(time.Second).Add(-30 * time.Second)
	var want []uint64
	const windows, killAfter = 8, 4
	for k := range windows {
		end := w0.Add(time.Duration(2*k) * time.Second)
		var recs []*kgo.Record
		// Demand changes every window, so every window's plan differs.
		for _, e := range []*schemas.Estimate{engineEst("b-0", "region-b", 100, end), engineEst("c-0", "region-c", 80, end), demandEst("region-b", 100+float64(5*k), end)} {
			v, _ := proto.Marshal(e)
			recs = append(recs, &kgo.Record{Topic: topics.Estimates, Value: v})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		want = append(want, uint64(end.UnixMilli()))
		if k == killAfter {
			a.stop() // mid-run: it may be planning or publishing this window
			if err := <-a.done; err != nil {
				t.Fatal(err)
			}
		}
		testenv.Eventually(t, 30*time.Second, func() bool { return holds(want[k]) }, "every cluster holds the window's version")
	}
	for _, c := range clusters {
		h, err := st.History(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, s := range h {
			got = append(got, s.GetVersion())
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s history versions %v, want each window once %v", c, got, want)
		}
	}
	var audit []uint64
	if err := st.ReadAudit(ctx, snapshots.AuditFrom{}, func(e snapshots.AuditEntry) bool {
		if e.Err != nil {
			t.Errorf("audit entry %d: %v", e.Seq, e.Err)
			return true
		}
		audit = append(audit, e.Snapshot.GetVersion())
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(audit, want) {
		t.Errorf("audit versions %v, want each window once %v", audit, want)
	}
	if p := a.o.Stats().SnapshotsPublished + b.o.Stats().SnapshotsPublished; p < windows {
		t.Errorf("%d publishes for %d windows", p, windows)
	}
}
