package agent

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// counters of a fake vLLM engine; metrics renders them with the given
// metric names.
type fakeState struct {
	running, waiting, kv                float64
	hits, queries, prompt, gen, success float64
	ttft                                [3]float64 // cumulative at 0.1, 1, +Inf
	ttftSum                             float64
}

type nameSet struct{ kv, hits, queries, itl string }

var (
	current = nameSet{"vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:inter_token_latency_seconds"}
	old     = nameSet{"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total", "vllm:time_per_output_token_seconds"}
)

func render(s fakeState, n nameSet) string {
	var b strings.Builder
	g := func(name string, v float64) {
		fmt.Fprintf(&b, "# TYPE %s gauge\n%s{model_name=\"m\"} %v\n", name, name, v)
	}
	c := func(name string, v float64) {
		fmt.Fprintf(&b, "# TYPE %s counter\n%s{model_name=\"m\"} %v\n", name, name, v)
	}
	h := func(name string, cum [3]float64, sum float64) {
		fmt.Fprintf(&b, "# TYPE %s histogram\n", name)
		fmt.Fprintf(&b, "%s_bucket{model_name=\"m\",le=\"0.1\"} %v\n", name, cum[0])
		fmt.Fprintf(&b, "%s_bucket{model_name=\"m\",le=\"1.0\"} %v\n", name, cum[1])
		fmt.Fprintf(&b, "%s_bucket{model_name=\"m\",le=\"+Inf\"} %v\n", name, cum[2])
		fmt.Fprintf(&b, "%s_sum{model_name=\"m\"} %v\n%s_count{model_name=\"m\"} %v\n", name, sum, name, cum[2])
	}
	g("vllm:num_requests_running", s.running)
	g("vllm:num_requests_waiting", s.waiting)
	g(n.kv, s.kv)
	c(n.hits, s.hits)
	c(n.queries, s.queries)
	c("vllm:prompt_tokens_total", s.prompt)
	c("vllm:generation_tokens_total", s.gen)
	fmt.Fprintf(&b, "# TYPE vllm:request_success_total counter\nvllm:request_success_total{model_name=\"m\",finished_reason=\"stop\"} %v\nvllm:request_success_total{model_name=\"m\",finished_reason=\"length\"} 0\n", s.success)
	h("vllm:time_to_first_token_seconds", s.ttft, s.ttftSum)
	h(n.itl, s.ttft, s.ttftSum/10)
	g("switchyard_enginesim_max_num_seqs", 128)
	g("switchyard_enginesim_replicas", 2)
	return b.String()
}

// fakeEngine serves render(state) on /metrics and healthStatus on /health.
type fakeEngine struct {
	mu     sync.Mutex
	state  fakeState
	names  nameSet
	health atomic.Int32
	srv    *httptest.Server
}

func newFakeEngine(t *testing.T, n nameSet) *fakeEngine {
	f := &fakeEngine{names: n}
	f.health.Store(http.StatusOK)
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		fmt.Fprint(w, render(f.state, f.names))
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(f.health.Load())) })
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEngine) set(s fakeState) {
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
}

func TestScrapeDeltas(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names nameSet
	}{{"current_names", current}, {"old_names", old}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEngine(t, tc.names)
			s := NewScraper(Target{ID: "e1", URL: f.srv.URL, Region: "us", GPUClass: "h100"}, nil)
			t0 := time.Unix(1000, 0)
			f.set(fakeState{running: 3, kv: 0.5, hits: 10, queries: 100, prompt: 1000, gen: 200, success: 5, ttft: [3]float64{1, 4, 5}, ttftSum: 2})
			sig, err := s.Scrape(context.Background(), t0)
			if err != nil {
				t.Fatal(err)
			}
			if sig.GetIntervalSeconds() != 0 || sig.GetRequestsFinished() != 0 || sig.GetTtftSeconds() != nil {
				t.Errorf("first scrape has deltas: %v", sig)
			}
			f.set(fakeState{running: 7, waiting: 2, kv: 0.75, hits: 40, queries: 160, prompt: 3000, gen: 500, success: 9, ttft: [3]float64{2, 7, 9}, ttftSum: 5})
			sig, err = s.Scrape(context.Background(), t0.Add(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			want := &schemas.EngineSignal{
				SchemaVersion: schemas.Version, EngineId: "e1", EndpointUrl: f.srv.URL, Region: "us", GpuClass: "h100",
				EventTimeUnixMs: t0.Add(2 * time.Second).UnixMilli(), ReadyReplicas: 2, Health: schemas.Health_HEALTH_HEALTHY,
				RunningRequests: 7, WaitingRequests: 2, KvCacheUsage: 0.75, PrefixCacheHits: 30, PrefixCacheQueries: 60,
				IntervalSeconds: 2, RequestsFinished: 4, PromptTokens: 2000, GenerationTokens: 300, Model: "m", MaxBatch: 64, MaxBatchSource: "engine_metrics",
				TtftSeconds: &schemas.Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{1, 2, 1}, Sum: 3, Count: 4},
				TbotSeconds: &schemas.Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{1, 2, 1}, Sum: 0.3, Count: 4},
			}
			if math.Abs(sig.GetTbotSeconds().GetSum()-0.3) < 1e-9 {
				sig.TbotSeconds.Sum = 0.3
			}
			if !proto.Equal(sig, want) {
				t.Errorf("signal\n got %v\nwant %v", sig, want)
			}
			if err := estimate.ValidateSignal(sig, time.Time{}); err != nil {
				t.Errorf("agent signal invalid: %v", err)
			}
			// A restarted engine resets its counters: the delta is the new value.
			f.set(fakeState{hits: 3, queries: 6, success: 1, ttft: [3]float64{1, 1, 1}, ttftSum: 0.05})
			sig, err = s.Scrape(context.Background(), t0.Add(4*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if sig.GetPrefixCacheHits() != 3 || sig.GetRequestsFinished() != 1 || sig.GetTtftSeconds().GetCount() != 1 {
				t.Errorf("after reset: %v", sig)
			}
		})
	}
}

func TestScrapeHealth(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   schemas.Health
	}{
		{200, schemas.Health_HEALTH_HEALTHY},
		{404, schemas.Health_HEALTH_HEALTHY},
		{503, schemas.Health_HEALTH_UNHEALTHY},
		{429, schemas.Health_HEALTH_DEGRADED},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			f := newFakeEngine(t, current)
			f.health.Store(int32(tc.status))
			sig, err := NewScraper(Target{ID: "e", URL: f.srv.URL + "/metrics"}, nil).Scrape(context.Background(), time.Unix(1, 0))
			if err != nil {
				t.Fatal(err)
			}
			if sig.GetHealth() != tc.want {
				t.Errorf("health = %v, want %v", sig.GetHealth(), tc.want)
			}
			if tc.want == schemas.Health_HEALTH_UNHEALTHY && sig.GetReadyReplicas() != 0 {
				t.Errorf("unhealthy engine has %d ready replicas", sig.GetReadyReplicas())
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		sig, err := NewScraper(Target{ID: "e", URL: "http://127.0.0.1:1"}, nil).Scrape(context.Background(), time.Unix(1, 0))
		if err == nil || sig.GetHealth() != schemas.Health_HEALTH_UNHEALTHY {
			t.Errorf("unreachable engine: err %v, signal %v", err, sig)
		}
	})
}

func TestPublishesSignals(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs after the other cleanups
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("agent")
	f := newFakeEngine(t, current)
	f.set(fakeState{running: 1, success: 1})
	reg := prometheus.NewRegistry()
	s, err := New(testenv.Client(t, kc, ClientOpts()...), Config{
		Engines:     []Target{{ID: "good", URL: f.srv.URL, Region: "us", GPUClass: "a100"}, {ID: "down", URL: "http://127.0.0.1:1"}},
		Interval:    20 * time.Millisecond,
		TopicPrefix: "agent", Registerer: reg, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	cl := testenv.Client(t, kc, kgo.ConsumeTopics(topics.Signals), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	health := map[string]schemas.Health{}
	testenv.Eventually(t, 10*time.Second, func() bool {
		pctx, pcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer pcancel()
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			sig, err := estimate.DecodeSignal(r.Value, r.Timestamp)
			if err != nil {
				t.Errorf("agent published an invalid signal: %v", err)
				return
			}
			if string(r.Key) != sig.GetEngineId() {
				t.Errorf("key %q for engine %q", r.Key, sig.GetEngineId())
			}
			health[sig.GetEngineId()] = sig.GetHealth()
		})
		return health["good"] == schemas.Health_HEALTH_HEALTHY && health["down"] == schemas.Health_HEALTH_UNHEALTHY
	}, "signals of both engines")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.SignalsPublished < 2 || st.ScrapeErrors == 0 {
		t.Errorf("stats = %+v", st)
	}
}
