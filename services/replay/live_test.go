package replay

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/control"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/replay"
	"github.com/switchyard-llm/switchyard/streams/replay/replaytest"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// TestReplayReproducesLiveSnapshots runs the live processor and optimizer
// over a minute of history (real kfake and NATS), reads every snapshot
// they published from the audit stream, replays the same range with the
// same settings, and requires the same snapshots, byte for byte.
func TestReplayReproducesLiveSnapshots(t *testing.T) {
	kc := testenv.Kafka(t)
	ns := testenv.NATS(t)
	const prefix = "live"
	replaytest.History(t, kc, streams.TopicsFor(prefix), t0, 60*time.Second)
	settings := plan.Settings{Clusters: []string{"us", "eu"}, EstimateTTL: time.Hour}
	lastEnd := t0.Add(55 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pcfg := process.Config{TopicPrefix: prefix, Window: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second}
	proc, err := process.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	pcl := testenv.Client(t, kc, proc.ClientOpts()...)
	store, err := snapshots.Open(ctx, testenv.JetStream(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ocfg := control.Config{TopicPrefix: prefix, Settle: 200 * time.Millisecond, Settings: settings}
	opt, err := control.New(testenv.Client(t, kc, control.ClientOpts(ocfg)...), store, ocfg)
	if err != nil {
		t.Fatal(err)
	}
	liveCtx, stopLive := context.WithCancel(ctx)
	errs := make(chan error, 2)
	go func() { errs <- proc.Run(liveCtx, pcl) }()
	go func() { errs <- opt.Run(liveCtx) }()
	testenv.Eventually(t, 60*time.Second, func() bool {
		return opt.Stats().LatestVersion >= uint64(lastEnd.UnixMilli())
	}, "live optimizer planned the last window")
	stopLive()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}

	// Every whole snapshot the live optimizer published, from the audit
	// stream.
	js := testenv.JetStream(t, ns)
	cons, err := js.OrderedConsumer(ctx, snapshots.DefaultAuditStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var live []*schemas.WeightSnapshot
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for n := info.NumPending; n > 0; n-- {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var s schemas.WeightSnapshot
		if err := proto.Unmarshal(msg.Data(), &s); err != nil {
			t.Fatal(err)
		}
		live = append(live, &s)
	}
	if len(live) < 8 {
		t.Fatalf("live published %d snapshots, want one per window (>= 8)", len(live))
	}

	var out bytes.Buffer
	cfg := replay.Config{TopicPrefix: prefix, From: t0.Add(-time.Minute), To: lastEnd,
		Window: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second, Settings: settings}
	if _, err := replay.Run(ctx, testenv.Client(t, kc), cfg, &out, replay.Binary); err != nil {
		t.Fatal(err)
	}
	replayed, err := replay.ReadSnapshots(&out, replay.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if len(replayed) != len(live) {
		t.Fatalf("replay wrote %d snapshots, live published %d", len(replayed), len(live))
	}
	enc := proto.MarshalOptions{Deterministic: true}
	for i := range live {
		a, _ := enc.Marshal(live[i])
		b, _ := enc.Marshal(replayed[i])
		if !bytes.Equal(a, b) {
			t.Fatalf("snapshot %d (version %d) differs between live and replay:\nlive   %v\nreplay %v",
				i, live[i].GetVersion(), live[i], replayed[i])
		}
	}
	t.Logf("%d live snapshots reproduced byte for byte", len(live))
}
