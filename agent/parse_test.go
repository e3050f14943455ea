package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// bodyServer serves the body last set on /metrics and 404 on /health (as
// engines without a health endpoint do).
type bodyServer struct {
	mu   sync.Mutex
	body string
	srv  *httptest.Server
}

func newBodyServer(t *testing.T) *bodyServer {
	t.Helper()
	b := &bodyServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		b.mu.Lock()
		defer b.mu.Unlock()
		_, _ = w.Write([]byte(b.body))
	})
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	return b
}

func (b *bodyServer) set(body string) {
	b.mu.Lock()
	b.body = body
	b.mu.Unlock()
}

// scrapeFromZero scrapes body after a scrape of an empty /metrics, so every
// counter and histogram in body is a delta from zero.
func scrapeFromZero(t *testing.T, target Target, body string) *schemas.EngineSignal {
	t.Helper()
	b := newBodyServer(t)
	target.URL = b.srv.URL
	s := NewScraper(target, nil)
	t0 := time.Unix(1_700_000_000, 0)
	if _, err := s.Scrape(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	b.set(body)
	sig, err := s.Scrape(context.Background(), t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := estimate.ValidateSignal(sig, time.Time{}); err != nil {
		t.Fatalf("invalid signal: %v\n%v", err, sig)
	}
	return sig
}

// TestScrapeEngineFixtures scrapes /metrics pages written after each
// engine's own metric definitions (testdata/*.txt) and checks every value
// the signal takes from them.
func TestScrapeEngineFixtures(t *testing.T) {
	type hist struct{ count, sum float64 }
	for _, tc := range []struct {
		file                                 string
		running, waiting, kv                 float64
		hits, queries, prompt, gen, finished float64
		ttft, tbot                           *hist
		model                                string
	}{
		{file: "vllm-v1.txt", running: 16, waiting: 16, kv: 0.4375, hits: 48000, queries: 120000, prompt: 150000, gen: 60000, finished: 400,
			ttft: &hist{400, 96.5}, tbot: &hist{59600, 1230}, model: "meta-llama/Llama-3.1-8B-Instruct"},
		// V0: no prefix-cache counters; the hit-rate gauge applies to the
		// interval's prompt tokens.
		{file: "vllm-v0.txt", running: 7, waiting: 2, kv: 0.25, hits: 20000, queries: 40000, prompt: 40000, gen: 9000, finished: 100,
			ttft: &hist{100, 12}, tbot: &hist{8900, 190}, model: "meta-llama/Llama-3.1-8B-Instruct"},
		// Cached prompt tokens out of all prompt tokens.
		{file: "sglang.txt", running: 12, waiting: 3, kv: 0.31, hits: 36000, queries: 90000, prompt: 90000, gen: 40000, finished: 250,
			ttft: &hist{250, 30}, tbot: &hist{39750, 420}, model: "Qwen/Qwen2.5-7B-Instruct"},
		// No TTFT, no KV gauge; tokens are the sums of per-request
		// histograms; TBOT is the per-request mean time per token.
		{file: "tgi.txt", running: 8, waiting: 4, prompt: 60000, gen: 15000, finished: 120, tbot: &hist{120, 2.6}},
		// A hit-rate gauge but no prompt-token counter: no prefix-cache
		// values; finished requests from the e2e histogram.
		{file: "trtllm.txt", running: 6, waiting: 1, kv: 0.27, finished: 80,
			ttft: &hist{80, 3.2}, tbot: &hist{7920, 60}, model: "TinyLlama/TinyLlama-1.1B-Chat-v1.0"},
	} {
		t.Run(strings.TrimSuffix(tc.file, ".txt"), func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			sig := scrapeFromZero(t, Target{ID: "e", Region: "r", GPUClass: "h100"}, string(body))
			near := func(name string, got, want float64) {
				t.Helper()
				if d := got - want; d > 1e-9*max(1, want) || d < -1e-9*max(1, want) {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			near("running", sig.GetRunningRequests(), tc.running)
			near("waiting", sig.GetWaitingRequests(), tc.waiting)
			near("kv_cache_usage", sig.GetKvCacheUsage(), tc.kv)
			near("prefix_cache_hits", sig.GetPrefixCacheHits(), tc.hits)
			near("prefix_cache_queries", sig.GetPrefixCacheQueries(), tc.queries)
			near("prompt_tokens", sig.GetPromptTokens(), tc.prompt)
			near("generation_tokens", sig.GetGenerationTokens(), tc.gen)
			near("requests_finished", sig.GetRequestsFinished(), tc.finished)
			near("interval_seconds", sig.GetIntervalSeconds(), 2)
			for _, h := range []struct {
				name string
				got  *schemas.Histogram
				want *hist
			}{{"ttft", sig.GetTtftSeconds(), tc.ttft}, {"tbot", sig.GetTbotSeconds(), tc.tbot}} {
				switch {
				case h.want == nil && h.got != nil:
					t.Errorf("%s histogram %v, want none", h.name, h.got)
				case h.want != nil && h.got == nil:
					t.Errorf("no %s histogram", h.name)
				case h.want != nil:
					near(h.name+" count", float64(h.got.GetCount()), h.want.count)
					near(h.name+" sum", h.got.GetSum(), h.want.sum)
					var n uint64
					for _, c := range h.got.GetCounts() {
						n += c
					}
					near(h.name+" bucket total", float64(n), h.want.count)
				}
			}
			if sig.GetModel() != tc.model {
				t.Errorf("model %q, want %q", sig.GetModel(), tc.model)
			}
			if sig.GetHealth() != schemas.Health_HEALTH_HEALTHY || sig.GetReadyReplicas() != 1 {
				t.Errorf("health %v, ready replicas %d", sig.GetHealth(), sig.GetReadyReplicas())
			}
			// None of these engines states a batch limit (vLLM's
			// cache_config_info counts KV blocks, not requests).
			if sig.GetMaxBatch() != 0 {
				t.Errorf("max batch %d from an engine that states none", sig.GetMaxBatch())
			}
		})
	}
}

// TestMaxBatch checks where the published batch limit comes from: the
// engine list first, then a limit the engine's metrics state, else none.
func TestMaxBatch(t *testing.T) {
	vllm, err := os.ReadFile(filepath.Join("testdata", "vllm-v1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		configured uint32
		body       string
		want       uint32
		source     string
	}{
		{"vllm_states_none", 0, string(vllm), 0, ""},
		{"configured", 16, string(vllm), 16, "configured"},
		{"configured_over_engine", 16, string(vllm) + "# TYPE vllm:max_num_seqs gauge\nvllm:max_num_seqs 256\n", 16, "configured"},
		{"gauge", 0, string(vllm) + "# TYPE vllm:max_num_seqs gauge\nvllm:max_num_seqs{engine=\"0\"} 64\n", 64, "engine_metrics"},
		{"sglang_gauge", 0, "# TYPE sglang:max_running_requests gauge\nsglang:max_running_requests{tp_rank=\"0\"} 48\n", 48, "engine_metrics"},
		{"info_label", 0, "# TYPE vllm:scheduler_config_info gauge\nvllm:scheduler_config_info{max_num_seqs=\"32\",max_num_batched_tokens=\"8192\"} 1\n", 32, "engine_metrics"},
		{"info_label_not_a_number", 0, "# TYPE vllm:scheduler_config_info gauge\nvllm:scheduler_config_info{max_num_seqs=\"None\"} 1\n", 0, ""},
		{"enginesim_per_replica", 0, "# TYPE switchyard_enginesim_max_num_seqs gauge\nswitchyard_enginesim_max_num_seqs 512\n# TYPE switchyard_enginesim_replicas gauge\nswitchyard_enginesim_replicas 2\n", 256, "engine_metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig := scrapeFromZero(t, Target{ID: "e", MaxBatch: tc.configured}, tc.body)
			if sig.GetMaxBatch() != tc.want || sig.GetMaxBatchSource() != tc.source {
				t.Errorf("max batch %d from %q, want %d from %q", sig.GetMaxBatch(), sig.GetMaxBatchSource(), tc.want, tc.source)
			}
		})
	}
}

// TestKVCapacity checks where the published KV-cache size comes from:
// the engine list (per replica, times the replicas) first, then vLLM's
// cache_config_info labels (num_gpu_blocks x block_size, summed over
// engine cores) or SGLang's max_total_num_tokens gauge (rank 0 of each
// data-parallel rank), else none. The fixtures are the engines' own
// /metrics text.
func TestKVCapacity(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	vllm1, vllm0, sglang := read("vllm-v1.txt"), read("vllm-v0.txt"), read("sglang.txt")
	const dp2 = "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n" +
		`vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",num_gpu_blocks="27186"} 1.0` + "\n" +
		`vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="1",num_gpu_blocks="27000"} 1.0` + "\n"
	const sglangTP = "# TYPE sglang:max_total_num_tokens gauge\n" +
		`sglang:max_total_num_tokens{dp_rank="0",pp_rank="0",tp_rank="0"} 77000` + "\n" +
		`sglang:max_total_num_tokens{dp_rank="0",pp_rank="0",tp_rank="1"} 77000` + "\n" +
		`sglang:max_total_num_tokens{dp_rank="1",pp_rank="0",tp_rank="0"} 76000` + "\n"
	const enginesim = "# TYPE vllm:cache_config_info gauge\n" +
		`vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_gpu_blocks="4096"} 1` + "\n"
	for _, tc := range []struct {
		name       string
		configured uint64
		body       string
		want       float64
	}{
		{"vllm_v1", 0, vllm1, 27186 * 16},
		{"vllm_v0", 0, vllm0, 13000 * 16},
		{"vllm_data_parallel", 0, dp2, (27186 + 27000) * 16},
		{"sglang", 0, sglang, 77000},
		{"sglang_tensor_parallel", 0, sglangTP, 77000 + 76000},
		{"enginesim_vllm", 0, enginesim, 4096 * 16},
		{"configured_over_engine", 100_000, vllm1, 100_000},
		{"configured_times_replicas", 100_000, "# TYPE switchyard_enginesim_replicas gauge\nswitchyard_enginesim_replicas 3\n", 300_000},
		{"blocks_not_a_number", 0, "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\"} 1\n", 0},
		{"no_block_size", 0, "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{num_gpu_blocks=\"100\"} 1\n", 0},
		{"none", 0, read("tgi.txt"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig := scrapeFromZero(t, Target{ID: "e", KVCapacityTokens: tc.configured}, tc.body)
			if sig.GetKvCapacityTokens() != tc.want {
				t.Errorf("kv_capacity_tokens %v, want %v", sig.GetKvCapacityTokens(), tc.want)
			}
		})
	}
}

// TestPrefixCacheNeedsPromptTokens: a cached-token counter or a hit-rate
// gauge alone says nothing about how many tokens were looked up, so the
// signal then carries no prefix-cache values rather than a made-up rate.
func TestPrefixCacheNeedsPromptTokens(t *testing.T) {
	for _, body := range []string{
		"# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total{cache_source=\"device\"} 500\n",
		"# TYPE trtllm_kv_cache_hit_rate gauge\ntrtllm_kv_cache_hit_rate 0.5\n",
	} {
		sig := scrapeFromZero(t, Target{ID: "e"}, body)
		if sig.GetPrefixCacheHits() != 0 || sig.GetPrefixCacheQueries() != 0 {
			t.Errorf("%q: hits %v of %v queries, want none", body, sig.GetPrefixCacheHits(), sig.GetPrefixCacheQueries())
		}
	}
}
