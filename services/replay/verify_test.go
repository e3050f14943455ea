package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/control"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/replay"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// liveTraffic produces, in real time until ctx is done, what engines and
// gateways produce: each engine's signal every 250ms, and a request every
// 40ms alternating between clusters us and eu whose routing event (keyed
// by request, so one cluster's events spread over the partitions) is
// produced when it completes, 100ms to 3.5s after its start (longer than
// a window plus the allowed lateness); requests over a second also get an
// arrival record at their start, as the gateway sends. It returns how
// many requests completed more than slow after their start.
func liveTraffic(ctx context.Context, t *testing.T, cl *kgo.Client, topics streams.Topics, slow time.Duration) int {
	type inflight struct {
		id         int
		start, end time.Time
		cluster    string
	}
	var pending []inflight
	produce := func(topic, key string, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Error(err)
			return
		}
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: b}, func(_ *kgo.Record, err error) {
			if err != nil && ctx.Err() == nil {
				t.Error(err)
			}
		})
	}
	event := func(r inflight, now time.Time, status schemas.RequestStatus) *schemas.RoutingEvent {
		e := map[string]string{"us": "e1", "eu": "e2"}[r.cluster]
		ev := &schemas.RoutingEvent{SchemaVersion: schemas.Version, RequestId: fmt.Sprint(r.id), Cluster: r.cluster, EngineId: e,
			EventTimeUnixMs: r.start.UnixMilli(), Status: status, Stream: true, AffinityKeyHash: uint64(r.id%7 + 1)}
		if status == schemas.RequestStatus_REQUEST_STATUS_OK {
			ev.TtftMs, ev.EngineTtftMs, ev.PromptTokens, ev.OutputTokens = 90+float64(r.id%13)/7, 70, 300, 100
			ev.CompletionTimeUnixMs, ev.E2EMs = now.UnixMilli(), float64(now.Sub(r.start).Milliseconds())
			ev.CountedAtArrival = r.end.Sub(r.start) > time.Second
		}
		return ev
	}
	slowN, id := 0, 0
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var nextReq, nextSig time.Time
	for {
		select {
		case <-ctx.Done():
			return slowN
		case now := <-tick.C:
			if !now.Before(nextSig) {
				nextSig = now.Add(250 * time.Millisecond)
				for _, e := range []struct{ id, region, gpu string }{{"e1", "us", "h100"}, {"e2", "eu", "l4"}} {
					run := float64(len(pending) % 20)
					produce(topics.Signals, e.id, &schemas.EngineSignal{
						SchemaVersion: schemas.Version, EngineId: e.id, EndpointUrl: "http://" + e.id, Region: e.region, GpuClass: e.gpu,
						EventTimeUnixMs: now.UnixMilli(), ReadyReplicas: 1, Health: schemas.Health_HEALTH_HEALTHY,
						RunningRequests: run, IntervalSeconds: 0.25, RequestsFinished: 3, GenerationTokens: 300, MaxBatch: 64,
						TtftSeconds: &schemas.Histogram{Bounds: []float64{1}, Counts: []uint64{3, 0}, Sum: 0.2 + run/100, Count: 3},
						TbotSeconds: &schemas.Histogram{Bounds: []float64{1}, Counts: []uint64{3, 0}, Sum: 0.06, Count: 3},
					})
				}
			}
			if !now.Before(nextReq) {
				nextReq = now.Add(40 * time.Millisecond)
				r := inflight{id: id, start: now, end: now.Add(time.Duration(100+(id*337)%3400) * time.Millisecond), cluster: []string{"us", "eu"}[id%2]}
				id++
				pending = append(pending, r)
				if r.end.Sub(r.start) > time.Second {
					produce(topics.RoutingEvents, fmt.Sprint(r.id), event(r, now, schemas.RequestStatus_REQUEST_STATUS_IN_PROGRESS))
				}
			}
			kept := pending[:0]
			for _, r := range pending {
				if now.Before(r.end) {
					kept = append(kept, r)
					continue
				}
				if now.Sub(r.start) > slow {
					slowN++
				}
				produce(topics.RoutingEvents, fmt.Sprint(r.id), event(r, now, schemas.RequestStatus_REQUEST_STATUS_OK))
			}
			pending = kept
		}
	}
}

// runLive runs the live processor and optimizer (window 2s, slide 1s,
// allowed lateness 500ms) on kc and ns under live traffic for d, until
// the optimizer has planned the windows the traffic completed, and
// returns how many requests took longer than a window plus the lateness.
// With restartAt > 0 the restart component ("processor" or "optimizer")
// is stopped then and a new one started.
func runLive(t *testing.T, kc *kfake.Cluster, ns *server.Server, prefix string, d, restartAt time.Duration, restart string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topics := streams.TopicsFor(prefix)
	if err := streams.EnsureTopics(ctx, testenv.Client(t, kc), topics, 3); err != nil {
		t.Fatal(err)
	}
	pcfg := process.Config{TopicPrefix: prefix, Window: 2 * time.Second, Slide: time.Second, AllowedLateness: 500 * time.Millisecond}
	// A processor's client joins the consumer group when it is created,
	// so a replacement is created only when it starts (the clients are
	// closed at cleanup).
	newProc := func() (run func(context.Context) error, err error) {
		p, err := process.New(pcfg)
		if err != nil {
			return nil, err
		}
		cl, err := kgo.NewClient(append(p.ClientOpts(), kgo.SeedBrokers(kc.ListenAddrs()...))...)
		if err != nil {
			return nil, err
		}
		t.Cleanup(cl.Close)
		return func(ctx context.Context) error { return p.Run(ctx, cl) }, nil
	}
	proc, err := newProc()
	if err != nil {
		t.Fatal(err)
	}
	store, err := snapshots.Open(ctx, testenv.JetStream(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ocfg := control.Config{TopicPrefix: prefix, Settle: 200 * time.Millisecond,
		Settings: plan.Settings{Clusters: []string{"us", "eu"}, MinDemandRPS: 1, RegionRTTms: map[string]map[string]float64{"us": {"us": 2, "eu": 80}, "eu": {"eu": 2, "us": 80}}}}
	newOpt := func() *control.Optimizer {
		opt, err := control.New(testenv.Client(t, kc, control.ClientOpts(ocfg)...), store, ocfg)
		if err != nil {
			t.Fatal(err)
		}
		return opt
	}
	opt := newOpt()
	liveCtx, stopLive := context.WithCancel(ctx)
	errs := make(chan error, 3)
	procCtx, stopProc := context.WithCancel(liveCtx)
	defer stopProc()
	go func() { errs <- proc(procCtx) }()
	optCtx, stopOpt := context.WithCancel(liveCtx)
	defer stopOpt()
	go func() { errs <- opt.Run(optCtx) }()
	trafficCtx, stopTraffic := context.WithTimeout(ctx, d)
	defer stopTraffic()
	var restarted chan struct{}
	if restartAt > 0 {
		restarted = make(chan struct{})
		nextOpt := newOpt()
		time.AfterFunc(restartAt, func() {
			defer close(restarted)
			stop := map[string]context.CancelFunc{"processor": stopProc, "optimizer": stopOpt}[restart]
			stop()
			if err := <-errs; err != nil {
				t.Error(err)
			}
			if restart == "processor" {
				p, err := newProc()
				if err != nil {
					t.Error(err)
					return
				}
				go func() { errs <- p(liveCtx) }()
				return
			}
			opt = nextOpt
			go func() { errs <- opt.Run(liveCtx) }()
		})
	}
	slow := liveTraffic(trafficCtx, t, testenv.Client(t, kc), topics, 2500*time.Millisecond)
	if restarted != nil {
		<-restarted
	}
	// The last window the traffic completes ends a slide plus the
	// lateness before its last signal.
	lastEnd := time.Now().Add(-1500 * time.Millisecond).Truncate(time.Second)
	testenv.Eventually(t, 20*time.Second, func() bool { return opt.Stats().LatestVersion >= uint64(lastEnd.UnixMilli()) },
		"live optimizer planned the last complete window")
	stopLive()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return slow
}

func verifyArgs(kc *kfake.Cluster, ns *server.Server, prefix string) []string {
	return []string{"--verify", "--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--nats-url", ns.ClientURL(), "--topic-prefix", prefix}
}

// TestVerifyReproducesLiveRun runs the processor and optimizer live for 8
// seconds of real-time traffic in which about a third of the requests
// complete more than a window plus the allowed lateness after they
// started (their routing events are produced at completion), then runs
// `replay --verify`, which replays with the settings the live services
// recorded: every live snapshot is reproduced byte for byte and no record
// was late. A snapshot altered on the audit stream then makes it report
// the difference and fail.
func TestVerifyReproducesLiveRun(t *testing.T) {
	kc := testenv.Kafka(t)
	ns := testenv.NATS(t)
	const prefix = "vlive"
	slow := runLive(t, kc, ns, prefix, 8*time.Second, 0, "")
	if slow < 20 {
		t.Fatalf("only %d requests took longer than a window plus the lateness", slow)
	}

	var stdout, stderr bytes.Buffer
	if err := Command().Run(context.Background(), verifyArgs(kc, ns, prefix), &stdout, &stderr); err != nil {
		t.Fatalf("replay --verify: %v\nstdout %s\nstderr %s", err, stdout.String(), stderr.String())
	}
	var res replay.VerifyResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	t.Logf("%s (%d slow requests)", strings.TrimSpace(stdout.String()), slow)
	if res.Compared < 5 || res.Identical != res.Compared || res.MaxWeightDiff != 0 || res.Late != 0 || res.Missing != 0 {
		t.Fatalf("verify: %+v", res)
	}

	t.Run("sub-range replay reproduces live", func(t *testing.T) { subRangesReproduceLive(t, kc, ns, prefix) })

	t.Run("altered snapshot fails", func(t *testing.T) {
		js := testenv.JetStream(t, ns)
		live, err := replay.ReadAudit(context.Background(), js, "")
		if err != nil {
			t.Fatal(err)
		}
		bad := proto.CloneOf(live[len(live)/2])
		w := bad.GetClusters()[0].GetWeights()[0]
		w.Weight += 0.125
		b, err := proto.Marshal(bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(context.Background(), snapshots.DefaultAuditSubject, b); err != nil {
			t.Fatal(err)
		}
		stdout.Reset()
		err = Command().Run(context.Background(), verifyArgs(kc, ns, prefix), &stdout, &stderr)
		if !errors.Is(err, ErrNotReproduced) {
			t.Fatalf("err %v, want ErrNotReproduced", err)
		}
		var res2 replay.VerifyResult
		if err := json.Unmarshal(stdout.Bytes(), &res2); err != nil {
			t.Fatalf("output %q: %v", stdout.String(), err)
		}
		if res2.Compared != res.Compared+1 || res2.Identical != res.Identical || math.Abs(res2.MaxWeightDiff-0.125) > 1e-12 || res2.FirstDiffVersion != bad.GetVersion() {
			t.Fatalf("verify after altering snapshot %d: %+v", bad.GetVersion(), res2)
		}
	})
}

// TestVerifyAfterRestart: the live processor or optimizer restarts
// halfway through 8 s of traffic (the processor resumes from its
// checkpoint and rebuilds its open windows; the optimizer resumes from
// the published snapshots and applies the windows already published
// without planning them); the replay, which runs each once over the whole
// history, still reproduces every snapshot.
func TestVerifyAfterRestart(t *testing.T) {
	for _, restart := range []string{"processor", "optimizer"} {
		t.Run(restart, func(t *testing.T) {
			kc := testenv.Kafka(t)
			ns := testenv.NATS(t)
			prefix := "vrestart-" + restart
			runLive(t, kc, ns, prefix, 8*time.Second, 4*time.Second, restart)
			var stdout, stderr bytes.Buffer
			if err := Command().Run(context.Background(), verifyArgs(kc, ns, prefix), &stdout, &stderr); err != nil {
				t.Fatalf("replay --verify: %v\nstdout %s\nstderr %s", err, stdout.String(), stderr.String())
			}
			var res replay.VerifyResult
			if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
				t.Fatalf("output %q: %v", stdout.String(), err)
			}
			t.Logf("%s", strings.TrimSpace(stdout.String()))
			if res.Compared < 5 || res.Identical != res.Compared || res.ProcessorSettings != 1 || res.OptimizerSettings != 1 {
				t.Fatalf("verify: %+v", res)
			}
		})
	}
}

// subRangesReproduceLive replays sub-ranges of a live run through the
// command without a config (the recorded settings, warmed from the whole
// history) and checks that every snapshot it writes is the live one of
// its version, byte for byte; with an override the same range differs.
func subRangesReproduceLive(t *testing.T, kc *kfake.Cluster, ns *server.Server, prefix string) {
	live, err := replay.ReadAudit(context.Background(), testenv.JetStream(t, ns), "")
	if err != nil {
		t.Fatal(err)
	}
	byVersion := map[uint64]*schemas.WeightSnapshot{}
	for _, s := range live {
		byVersion[s.GetVersion()] = s
	}
	n := len(live)
	v := func(i int) string { return fmt.Sprint(live[i].GetVersion()) }
	replayRange := func(from, to string, extra ...string) []*schemas.WeightSnapshot {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args := append([]string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--topic-prefix", prefix,
			"--from", from, "--to", to, "--out", "-", "--format", "binary"}, extra...)
		if err := Command().Run(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("replay %v: %v\n%s", args, err, stderr.String())
		}
		snaps, err := replay.ReadSnapshots(&stdout, replay.Binary)
		if err != nil {
			t.Fatal(err)
		}
		return snaps
	}
	for _, r := range [][2]int{{n / 2, n - 1}, {n / 4, 3 * n / 4}, {0, n / 3}} {
		snaps := replayRange(v(r[0]), v(r[1]))
		if len(snaps) != r[1]-r[0] {
			t.Fatalf("range (%s, %s]: %d snapshots, want %d", v(r[0]), v(r[1]), len(snaps), r[1]-r[0])
		}
		for _, s := range snaps {
			l := byVersion[s.GetVersion()]
			if l == nil || !proto.Equal(unsigned(l), s) {
				t.Fatalf("range (%s, %s]: snapshot %d differs from live:\nlive     %v\nreplayed %v", v(r[0]), v(r[1]), s.GetVersion(), l, s)
			}
		}
	}
	// The same late range with the utilization capped at 0.05 routes
	// differently: the override applies over the recorded settings.
	capped := replayRange(v(n/2), v(n-1), "--set", "optimizer.max_utilization=0.05")
	differ := 0
	for _, s := range capped {
		if !proto.Equal(unsigned(byVersion[s.GetVersion()]), s) {
			differ++
		}
	}
	if differ == 0 {
		t.Fatalf("--set optimizer.max_utilization=0.05: all %d snapshots equal live", len(capped))
	}
}

// unsigned is s without its signature fields (the replay signs nothing).
func unsigned(s *schemas.WeightSnapshot) *schemas.WeightSnapshot {
	if s == nil {
		return nil
	}
	s = proto.CloneOf(s)
	s.Signature, s.SigningKeyId = nil, ""
	return s
}
