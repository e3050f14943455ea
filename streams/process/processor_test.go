package process

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
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
)

// t0 is an arbitrary window-aligned event time.
var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func signal(engine, gpu string, at time.Time, running, finished float64) *schemas.EngineSignal {
	return &schemas.EngineSignal{
		SchemaVersion: schemas.Version, EngineId: engine, EndpointUrl: "http://" + engine, Region: "us", GpuClass: gpu,
		EventTimeUnixMs: at.UnixMilli(), ReadyReplicas: 1, Health: schemas.Health_HEALTH_HEALTHY,
		RunningRequests: running, KvCacheUsage: 0.2, PrefixCacheHits: 30, PrefixCacheQueries: 100,
		IntervalSeconds: 2, RequestsFinished: finished, PromptTokens: finished * 500, GenerationTokens: finished * 100,
		MaxBatch:    64,
		TtftSeconds: &schemas.Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{uint64(finished), 0, 0}, Sum: finished * (0.05 + running/1000), Count: uint64(finished)},
		TbotSeconds: &schemas.Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{uint64(finished), 0, 0}, Sum: finished * 0.02, Count: uint64(finished)},
	}
}

func routing(cluster, engine string, at time.Time, i int) *schemas.RoutingEvent {
	return &schemas.RoutingEvent{
		SchemaVersion: schemas.Version, RequestId: fmt.Sprintf("r%d", i), Cluster: cluster, EngineId: engine,
		Status: schemas.RequestStatus_REQUEST_STATUS_OK, EventTimeUnixMs: at.UnixMilli(), Stream: true,
		TtftMs: 80, EngineTtftMs: 60, PromptTokens: 500, OutputTokens: 100,
	}
}

type input struct {
	topic string // "signals" or "routing"
	key   string
	msg   proto.Message
	raw   []byte // when set, sent instead of msg
}

// workload is dur of signals from two engines every 2s and 4 routing
// events per second from two clusters.
func workload(from time.Time, dur time.Duration) []input {
	var out []input
	i := 0
	for d := time.Duration(0); d < dur; d += 250 * time.Millisecond {
		at := from.Add(d)
		if d%(2*time.Second) == 0 {
			u := float64((d / time.Second) % 40)
			out = append(out,
				input{"signals", "e1", signal("e1", "h100", at, u, 10+u/4), nil},
				input{"signals", "e2", signal("e2", "l4", at, u/2, 4), nil})
		}
		c, e := "us", "e1"
		if i%2 == 1 {
			c, e = "eu", "e2"
		}
		out = append(out, input{"routing", c, routing(c, e, at, i), nil})
		i++
	}
	return out
}

func produce(t *testing.T, cl *kgo.Client, topics streams.Topics, in []input) {
	t.Helper()
	var recs []*kgo.Record
	for _, x := range in {
		v := x.raw
		if v == nil {
			var err error
			if v, err = proto.Marshal(x.msg); err != nil {
				t.Fatal(err)
			}
		}
		topic := topics.Signals
		if x.topic == "routing" {
			topic = topics.RoutingEvents
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(x.key), Value: v})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// collector reads a topic from the start in the background.
type collector struct {
	mu   sync.Mutex
	recs []*kgo.Record
}

func collect(t *testing.T, kc *kfake.Cluster, topic string) *collector {
	t.Helper()
	c := &collector{}
	cl := testenv.Client(t, kc, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				c.mu.Lock()
				c.recs = append(c.recs, r)
				c.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

func (c *collector) snapshot() []*kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*kgo.Record(nil), c.recs...)
}

// byWindow maps "key@window_end" to the estimate bytes; it fails the test
// when one key and window was published with two different values.
func byWindow(t *testing.T, recs []*kgo.Record) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, r := range recs {
		e, err := estimate.DecodeEstimate(r.Value)
		if err != nil {
			t.Fatalf("estimate %q: %v", r.Key, err)
		}
		var end int64
		switch k := e.GetKind().(type) {
		case *schemas.Estimate_Engine:
			end = k.Engine.GetWindowEndUnixMs()
		case *schemas.Estimate_Demand:
			end = k.Demand.GetWindowEndUnixMs()
		case *schemas.Estimate_Network:
			end = k.Network.GetWindowEndUnixMs()
		}
		id := fmt.Sprintf("%s@%d", r.Key, end)
		if prev, ok := out[id]; ok && string(prev) != string(r.Value) {
			t.Fatalf("%s published twice with different values", id)
		}
		out[id] = r.Value
	}
	return out
}

// newProcessor returns a processor for cfg on its own client of kc, and
// a func that closes the client (leaving the group, as a stopped
// processor does); cleanup closes it too.
func newProcessor(t testing.TB, kc *kfake.Cluster, cfg Config) (*Processor, func()) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(p.ClientOpts(), kgo.SeedBrokers(kc.ListenAddrs()...))...)
	if err != nil {
		t.Fatal(err)
	}
	closeClient := sync.OnceFunc(cl.Close)
	t.Cleanup(closeClient)
	p.cl = cl // Run's; set here for the tests that call its steps
	return p, closeClient
}

func start(t *testing.T, kc *kfake.Cluster, cfg Config) (*Processor, func()) {
	t.Helper()
	s, closeClient := newProcessor(t, kc, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		err := s.Run(ctx, s.cl)
		closeClient()
		errc <- err
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil && !errors.Is(err, errCrash) {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return s, stop
}

var errCrash = errors.New("simulated crash")

func config(prefix string) Config {
	return Config{
		TopicPrefix: prefix, Group: "proc-" + prefix,
		Window: 10 * time.Second, Slide: 5 * time.Second, AllowedLateness: time.Second,
	}
}

func ensure(t *testing.T, kc *kfake.Cluster, topics streams.Topics) *kgo.Client {
	t.Helper()
	cl := testenv.Client(t, kc)
	if err := streams.EnsureTopics(context.Background(), cl, topics, 3); err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestEndToEnd(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("e2e")
	cl := ensure(t, kc, topics)
	produce(t, cl, topics, workload(t0, 40*time.Second))
	est := collect(t, kc, topics.Estimates)
	s, stop := start(t, kc, config("e2e"))
	// Windows ending at t0+10s … t0+35s fire (the watermark reaches
	// t0+39.75s; a window fires at end+1s).
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, ok := byWindow(t, est.snapshot())[fmt.Sprintf("engine/e1@%d", t0.Add(35*time.Second).UnixMilli())]
		return ok
	}, "last complete window published")
	stop()
	got := byWindow(t, est.snapshot())
	st := s.Stats()
	if st.SignalsConsumed != 40 || st.RoutingEventsConsumed != 160 || st.DeadLettered != 0 || st.Late != 0 {
		t.Errorf("stats = %+v", st)
	}
	key := func(k string, end time.Duration) string { return fmt.Sprintf("%s@%d", k, t0.Add(end).UnixMilli()) }
	decode := func(id string) *schemas.Estimate {
		t.Helper()
		b, ok := got[id]
		if !ok {
			t.Fatalf("missing %s; have %v", id, keys(got))
		}
		e, err := estimate.DecodeEstimate(b)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	t.Run("engine", func(t *testing.T) {
		e := decode(key("engine/e1", 20*time.Second)).GetEngine()
		if e.GetSignalCount() != 5 || e.GetCapacityRps() <= 0 || e.GetHealth() != schemas.Health_HEALTH_HEALTHY {
			t.Errorf("engine estimate = %v", e)
		}
		if math.Abs(e.GetPrefixHitRate()-0.3) > 1e-9 {
			t.Errorf("prefix hit rate = %v, want 0.3", e.GetPrefixHitRate())
		}
		pts := e.GetTtftProfile().GetPoints()
		if len(pts) == 0 {
			t.Fatal("no ttft profile")
		}
		for i := 1; i < len(pts); i++ {
			if pts[i].GetLatencyMs() < pts[i-1].GetLatencyMs()-1e-9 {
				t.Errorf("ttft profile decreases at %d: %v", i, pts)
			}
		}
	})
	t.Run("demand", func(t *testing.T) {
		d := decode(key("demand/us", 20*time.Second)).GetDemand()
		if math.Abs(d.GetDemandRps()-2) > 1e-9 || d.GetRequestCount() != 20 || d.GetMeanPromptTokens() != 500 {
			t.Errorf("demand = %v", d)
		}
		if math.Abs(d.GetForecastRps()-2) > 1e-6 {
			t.Errorf("forecast = %v, want 2 for a flat rate", d.GetForecastRps())
		}
	})
	t.Run("network", func(t *testing.T) {
		n := decode(key("network/eu/e2", 20*time.Second)).GetNetwork()
		if math.Abs(n.GetRttMs()-20) > 1e-9 || n.GetSamples() != 20 {
			t.Errorf("network = %v", n)
		}
	})
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestDeadLetter(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("dlq")
	cl := ensure(t, kc, topics)
	mut := func(f func(*schemas.EngineSignal)) *schemas.EngineSignal {
		s := signal("e1", "h100", t0.Add(3*time.Second), 5, 5)
		f(s)
		return s
	}
	bad := []struct {
		in   input
		code string
	}{
		{input{"signals", "e1", nil, []byte{0xff, 0xff, 0xff}}, estimate.ReasonUndecodable},
		{input{"signals", "e1", mut(func(s *schemas.EngineSignal) { s.KvCacheUsage = math.NaN() }), nil}, estimate.ReasonInvalidValue},
		{input{"signals", "e1", mut(func(s *schemas.EngineSignal) { s.RunningRequests = -1 }), nil}, estimate.ReasonInvalidValue},
		{input{"signals", "e1", mut(func(s *schemas.EngineSignal) { s.EventTimeUnixMs = time.Now().Add(time.Hour).UnixMilli() }), nil}, estimate.ReasonFutureTime},
		{input{"routing", "us", &schemas.RoutingEvent{SchemaVersion: schemas.Version, Cluster: "us", EventTimeUnixMs: t0.UnixMilli(), TtftMs: math.Inf(1)}, nil}, estimate.ReasonInvalidValue},
	}
	var in []input
	wantCodes := map[string]int{}
	for _, b := range bad {
		in = append(in, b.in)
		wantCodes[b.code]++
	}
	in = append(in, workload(t0, 20*time.Second)...)
	produce(t, cl, topics, in)
	dlq := collect(t, kc, topics.DeadLetter)
	est := collect(t, kc, topics.Estimates)
	s, stop := start(t, kc, config("dlq"))
	testenv.Eventually(t, 20*time.Second, func() bool { return len(dlq.snapshot()) == len(bad) && len(est.snapshot()) > 0 },
		"bad records dead-lettered and estimates still published")
	stop()
	gotCodes := map[string]int{}
	for _, r := range dlq.snapshot() {
		reason := streams.Reason(r)
		code, _, _ := strings.Cut(reason, ":")
		gotCodes[code]++
		if reason == "" {
			t.Errorf("dead letter without reason: %v", r)
		}
	}
	if fmt.Sprint(gotCodes) != fmt.Sprint(wantCodes) {
		t.Errorf("dead-letter reasons = %v, want %v", gotCodes, wantCodes)
	}
	if st := s.Stats(); st.DeadLettered != uint64(len(bad)) {
		t.Errorf("dead lettered = %d, want %d", st.DeadLettered, len(bad))
	}
}

// TestRestartReproducesEstimates kills the processor mid-window (once
// without a final checkpoint and once between publishing and
// checkpointing) and checks that the estimates equal an uninterrupted
// run's.
func TestRestartReproducesEstimates(t *testing.T) {
	kc := testenv.Kafka(t)
	first := workload(t0, 33*time.Second) // ends mid-window
	second := workload(t0.Add(33*time.Second), 27*time.Second)
	first = append(first, input{"signals", "e1", nil, []byte("garbage")})

	// Uninterrupted.
	ref := streams.TopicsFor("ref")
	refCl := ensure(t, kc, ref)
	produce(t, refCl, ref, first)
	produce(t, refCl, ref, second)
	refEst := collect(t, kc, ref.Estimates)
	_, stopRef := start(t, kc, config("ref"))
	lastID := fmt.Sprintf("engine/e2@%d", t0.Add(55*time.Second).UnixMilli())
	testenv.Eventually(t, 30*time.Second, func() bool { _, ok := byWindow(t, refEst.snapshot())[lastID]; return ok }, "reference run done")
	stopRef()
	want := byWindow(t, refEst.snapshot())

	for _, tc := range []struct {
		name  string
		crash func(*Processor)
	}{
		{"kill", func(s *Processor) { s.noFinalCheckpoint = true }},
		{"crash_before_checkpoint", func(s *Processor) {
			// Crash after the windows of the first half are
			// published, before their checkpoint (the last one in the
			// run or the final one on cancel).
			s.beforeCheckpoint = func() error {
				st := s.Stats()
				if st.Checkpoints >= 1 && st.SignalsConsumed+st.RoutingEventsConsumed+st.DeadLettered == uint64(len(first)) {
					return errCrash
				}
				return nil
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topics := streams.TopicsFor("run-" + tc.name)
			cl := ensure(t, kc, topics)
			produce(t, cl, topics, first)
			est := collect(t, kc, topics.Estimates)
			cfg := config("run-" + tc.name)
			s1, closeClient := newProcessor(t, kc, cfg)
			s1.maxPoll = 40
			tc.crash(s1)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				err := s1.Run(ctx, s1.cl)
				closeClient()
				errc <- err
			}()
			testenv.Eventually(t, 20*time.Second, func() bool {
				st := s1.Stats()
				return len(errc) > 0 || st.SignalsConsumed+st.RoutingEventsConsumed+st.DeadLettered == uint64(len(first)) && st.Checkpoints >= 2
			}, "first half consumed")
			cancel()
			err := <-errc
			if tc.name != "kill" && !errors.Is(err, errCrash) {
				t.Fatalf("run ended with %v, want the simulated crash", err)
			}
			if err != nil && !errors.Is(err, errCrash) {
				t.Fatal(err)
			}
			produce(t, cl, topics, second)
			s2, stop := start(t, kc, cfg)
			testenv.Eventually(t, 30*time.Second, func() bool { _, ok := byWindow(t, est.snapshot())[lastID]; return ok }, "restarted run done")
			stop()
			got := byWindow(t, est.snapshot())
			if len(got) != len(want) {
				t.Errorf("got %d estimates, want %d", len(got), len(want))
			}
			for id, b := range want {
				if string(got[id]) != string(b) {
					t.Errorf("%s differs after restart", id)
				}
			}
			if dl := s1.Stats().DeadLettered + s2.Stats().DeadLettered; tc.name == "crash_before_checkpoint" && dl > 2 {
				t.Errorf("dead lettered %d times", dl)
			}
			t.Logf("first run %+v, second run %+v", s1.Stats(), s2.Stats())
		})
	}
}

// TestRunChecksClient: Run refuses, before any I/O, a client not created
// with the processor's ClientOpts (a single processor's client is not a
// partitioned one's); a client created with them runs (here, stopped at
// once).
func TestRunChecksClient(t *testing.T) {
	kc := testenv.Kafka(t)
	cfg := config("chk")
	pcfg := cfg
	pcfg.Partitioned = true
	topics := streams.TopicsFor("chk")
	single, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		partitioned bool
		opts        []kgo.Opt // with testenv.Client; nil: no client
		want        string
	}{
		{"no_client", false, nil, "no kafka client"},
		{"no_group", false, []kgo.Opt{}, `group ""`},
		{"other_group", false, []kgo.Opt{kgo.ConsumerGroup("other"), kgo.ConsumeTopics(topics.Signals, topics.RoutingEvents), kgo.DisableAutoCommit()}, `group "other"`},
		{"auto_commit", false, []kgo.Opt{kgo.ConsumerGroup(cfg.Group), kgo.ConsumeTopics(topics.Signals, topics.RoutingEvents)}, "automatically"},
		{"one_topic", false, []kgo.Opt{kgo.ConsumerGroup(cfg.Group), kgo.ConsumeTopics(topics.Signals), kgo.DisableAutoCommit()}, topics.RoutingEvents},
		{"client_opts", false, single.ClientOpts(), ""},
		{"partitioned_single_opts", true, single.ClientOpts(), "rebalances"},
		{"partitioned_client_opts", true, nil, ""}, // its own ClientOpts
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.partitioned {
				c = pcfg
			}
			p, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			opts := tc.opts
			if tc.name == "partitioned_client_opts" {
				opts = p.ClientOpts()
			}
			var cl *kgo.Client
			if opts != nil {
				cl = testenv.Client(t, kc, opts...)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err = p.Run(ctx, cl)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: err %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
