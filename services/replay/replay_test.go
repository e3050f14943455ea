package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/process"
)

var t0 = time.Now().Add(-time.Hour).Truncate(time.Minute)

// history produces dur of traffic starting at t0 with Kafka timestamps
// equal to event times: two engines (us/h100, eu/l4) signalling every 2s
// and routing events from clusters us and eu every 100ms.
func history(t *testing.T, kc *kfake.Cluster, topics streams.Topics, dur time.Duration) {
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
		at := t0.Add(d)
		if d%(2*time.Second) == 0 {
			for _, e := range []struct{ id, region, gpu string }{{"e1", "us", "h100"}, {"e2", "eu", "l4"}} {
				run := float64(i % 40)
				add(topics.Signals, e.id, at, &schemas.EngineSignal{
					SchemaVersion: schemas.Version, EngineId: e.id, EndpointUrl: "http://" + e.id, Region: e.region, GpuClass: e.gpu,
					EventTimeUnixMs: at.UnixMilli(), ReadyReplicas: 1, Health: schemas.Health_HEALTH_HEALTHY,
					RunningRequests: run, IntervalSeconds: 2, RequestsFinished: 10, GenerationTokens: 1000, MaxBatch: 64,
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
			Status: schemas.RequestStatus_REQUEST_STATUS_OK, TtftMs: 90, EngineTtftMs: 70, PromptTokens: 300, OutputTokens: 100,
		})
		i++
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// liveEstimates runs the live processor over the history and returns its
// published estimates by "key@window_end".
func liveEstimates(t *testing.T, kc *kfake.Cluster, prefix string, lastEnd time.Time) map[string][]byte {
	t.Helper()
	p := liveProcessor(t, kc, prefix)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	testenv.Eventually(t, 20*time.Second, func() bool { return !p.Stats().LastWindowEnd.Before(lastEnd) }, "live processor done")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rd := testenv.Client(t, kc, kgo.ConsumeTopics(streams.TopicsFor(prefix).Estimates), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	out := map[string][]byte{}
	want := int(p.Stats().EstimatesPublished)
	testenv.Eventually(t, 10*time.Second, func() bool {
		pctx, pcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer pcancel()
		rd.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			e, err := estimate.DecodeEstimate(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%s@%d", r.Key, e.WindowEndUnixMs())] = r.Value
		})
		return len(out) >= want
	}, "live estimates read back")
	return out
}

// liveProcessor is the live processor over prefix's topics with the
// window settings the tests replay with.
func liveProcessor(t *testing.T, kc *kfake.Cluster, prefix string) *process.Processor {
	t.Helper()
	cfg := process.Config{TopicPrefix: prefix, Window: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second}
	p, err := process.New(testenv.Client(t, kc, process.ClientOpts(cfg)...), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReplay(t *testing.T) {
	kc := testenv.Kafka(t)
	const prefix = "rp"
	history(t, kc, streams.TopicsFor(prefix), 60*time.Second)
	live := liveEstimates(t, kc, prefix, t0.Add(55*time.Second))
	from, to := t0.Add(20*time.Second), t0.Add(50*time.Second)
	base := Config{KafkaBrokers: kc.ListenAddrs(), TopicPrefix: prefix, From: from, To: to,
		Window: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second}
	base.Settings.Clusters = []string{"us", "eu"}
	base.Settings.EstimateTTL = time.Hour // the history is an hour old

	t.Run("estimates_equal_live", func(t *testing.T) {
		cfg := base
		var mu sync.Mutex
		compared := 0
		cfg.OnWindow = func(f process.Fired) {
			mu.Lock()
			defer mu.Unlock()
			if end := time.UnixMilli(f.End); !end.After(from) || end.After(to) {
				return
			}
			for _, e := range f.Estimates {
				b, err := estimate.Marshal(e)
				if err != nil {
					t.Fatal(err)
				}
				id := fmt.Sprintf("%s@%d", estimate.Key(e), f.End)
				if !bytes.Equal(live[id], b) {
					t.Errorf("%s: replayed estimate differs from the live one", id)
				}
				compared++
			}
		}
		if _, err := Run(context.Background(), cfg, &bytes.Buffer{}, Binary); err != nil {
			t.Fatal(err)
		}
		// 6 windows end in (from, to]: 2 engines + 2 demand + 2 network each.
		if compared != 36 {
			t.Errorf("compared %d estimates, want 36", compared)
		}
	})

	t.Run("deterministic_snapshots", func(t *testing.T) {
		var outs [2]bytes.Buffer
		for i := range outs {
			res, err := Run(context.Background(), base, &outs[i], Binary)
			if err != nil {
				t.Fatal(err)
			}
			if res.Snapshots != 6 || res.DeadLettered != 0 || res.Late != 0 {
				t.Errorf("result %+v", res)
			}
		}
		if !bytes.Equal(outs[0].Bytes(), outs[1].Bytes()) {
			t.Error("two replays of the same range differ")
		}
		snaps, err := ReadSnapshots(bytes.NewReader(outs[0].Bytes()), Binary)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range snaps {
			end := from.Add(time.Duration(i+1) * 5 * time.Second).UnixMilli()
			if s.GetVersion() != uint64(end) || s.GetCreatedUnixMs() != end {
				t.Errorf("snapshot %d: version %d created %d", i, s.GetVersion(), s.GetCreatedUnixMs())
			}
			if len(s.GetClusters()) != 2 {
				t.Errorf("snapshot %d has %d clusters", i, len(s.GetClusters()))
			}
		}
	})

	t.Run("what_if_and_cli", func(t *testing.T) {
		dir := t.TempDir()
		cfgPath := filepath.Join(dir, "whatif.yaml")
		if err := os.WriteFile(cfgPath, []byte("processor:\n  window: 10s\n  slide: 5s\n  allowed_lateness: 1s\noptimizer:\n  estimate_ttl: 1h\n  clusters: [us, eu]\n  strict_residency: true\n  region_rtt_ms: {us: {us: 1}, eu: {eu: 1}}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		outPath := filepath.Join(dir, "out.jsonl")
		var stderr bytes.Buffer
		args := []string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--topic-prefix", prefix,
			"--from", from.Format(time.RFC3339Nano), "--to", fmt.Sprint(to.UnixMilli()), "--config", cfgPath, "--out", outPath}
		if err := Command().Run(context.Background(), args, &bytes.Buffer{}, &stderr); err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		f, err := os.Open(outPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		snaps, err := ReadSnapshots(f, JSONLines)
		if err != nil {
			t.Fatal(err)
		}
		if len(snaps) != 6 {
			t.Fatalf("%d snapshots", len(snaps))
		}
		// Strict residency with only same-region RTTs: each cluster routes
		// to its own region's engine only.
		for _, cw := range snaps[len(snaps)-1].GetClusters() {
			for _, w := range cw.GetWeights() {
				if w.GetWeight() > 0 && ((cw.GetCluster() == "us") != (w.GetEngineId() == "e1")) {
					t.Errorf("cluster %s routes %v to %s", cw.GetCluster(), w.GetWeight(), w.GetEngineId())
				}
			}
		}
	})
}

func TestParseConfig(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			var cfg Config
			err := LoadConfig(f, &cfg)
			good := strings.HasSuffix(f, ".good.yaml")
			if good && err != nil {
				t.Errorf("good config rejected: %v", err)
			}
			if !good && !errors.Is(err, ErrConfig) {
				t.Errorf("bad config: err %v, want ErrConfig", err)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--to", "1", "--out", "-"},
		{"--from", "x", "--to", "1", "--out", "-"},
		{"--from", "1", "--to", "2"},
		{"--from", "1", "--to", "2", "--out", "-", "--format", "xml"},
	} {
		err := Command().Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}
