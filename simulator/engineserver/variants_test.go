package engineserver

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/engine"
)

// TestMetricSets checks the names each --metrics value serves: vllm is
// exactly vLLM's own set (no batch limit, nothing enginesim-specific); full
// adds enginesim's gauges and counters.
func TestMetricSets(t *testing.T) {
	vllm := []string{
		"vllm:cache_config_info",
		"vllm:e2e_request_latency_seconds",
		"vllm:generation_tokens_total",
		"vllm:inter_token_latency_seconds",
		"vllm:kv_cache_usage_perc",
		"vllm:num_preemptions_total",
		"vllm:num_requests_running",
		"vllm:num_requests_waiting",
		"vllm:prefix_cache_hits_total",
		"vllm:prefix_cache_queries_total",
		"vllm:prompt_tokens_total",
		"vllm:request_prefill_time_seconds",
		"vllm:request_queue_time_seconds",
		"vllm:request_success_total",
		"vllm:time_to_first_token_seconds",
	}
	full := append(slices.Clone(vllm),
		"switchyard_enginesim_info",
		"switchyard_enginesim_kv_blocks_evicted_total",
		"switchyard_enginesim_kv_blocks_stored_total",
		"switchyard_enginesim_max_num_seqs",
		"switchyard_enginesim_replicas",
		"switchyard_enginesim_requests_canceled_total",
		"switchyard_enginesim_requests_rejected_total",
	)
	slices.Sort(full)
	for _, tc := range []struct {
		metrics string
		want    []string
	}{{"", full}, {MetricsFull, full}, {MetricsVLLM, vllm}} {
		t.Run("metrics="+tc.metrics, func(t *testing.T) {
			_, base := start(t, Config{GPUClass: "l4", Replicas: 2, Metrics: tc.metrics})
			// One request so that every labelled counter has a child.
			if code, b := post(t, base+"/v1/completions", `{"model":"switchyard-sim-8b","prompt":"hi","max_tokens":2}`); code != 200 {
				t.Fatalf("status %d: %s", code, b)
			}
			if code, _ := post(t, base+"/v1/completions", `{"model":"nope","prompt":"hi"}`); code != 404 {
				t.Fatalf("unknown model status %d", code)
			}
			var got []string
			for name, f := range scrape(t, base) {
				if len(f.GetMetric()) > 0 {
					got = append(got, name)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("families\n got %v\nwant %v", got, tc.want)
			}
			for _, n := range got {
				if tc.metrics == MetricsVLLM && strings.Contains(n, "max_num_seqs") {
					t.Errorf("vllm metrics expose a batch limit: %s", n)
				}
			}
		})
	}
}

// firstAndLast runs one request alone through s's engine model in virtual
// time and returns when its first token and its last token came.
func firstAndLast(t *testing.T, s *Service, req engine.Request) (first, last time.Duration) {
	t.Helper()
	if err := s.eng.Submit(0, req); err != nil {
		t.Fatal(err)
	}
	for next, ok := s.eng.NextEvent(); ok; next, ok = s.eng.NextEvent() {
		for _, ev := range s.eng.Advance(next) {
			switch ev.Kind {
			case engine.EventFirstToken:
				first = ev.Time
			case engine.EventFinished:
				return first, ev.Time
			}
		}
	}
	t.Fatal("request never finished")
	return 0, 0
}

// TestLatencyMultiplier checks that the multiplier slows prefill and decode
// alike: a request alone on the engine takes that many times as long to
// its first token and from its first token to its last.
func TestLatencyMultiplier(t *testing.T) {
	req := engine.Request{ID: 1, PromptTokens: 3000, OutputTokens: 50}
	base, err := New(Config{GPUClass: "h100"})
	if err != nil {
		t.Fatal(err)
	}
	ttft0, last0 := firstAndLast(t, base, req)
	for _, m := range []float64{6, 2.5, 0.5} {
		slow, err := New(Config{GPUClass: "h100", LatencyMultiplier: m})
		if err != nil {
			t.Fatal(err)
		}
		p, p0 := slow.preset, base.preset
		if p.StepBase != time.Duration(float64(p0.StepBase)*m) || p.PrefillTokensPerSec != p0.PrefillTokensPerSec/m || p.MaxSeqs != p0.MaxSeqs || p.KVBlocks != p0.KVBlocks {
			t.Errorf("x%v preset %+v from %+v", m, p, p0)
		}
		ttft, last := firstAndLast(t, slow, req)
		for _, c := range []struct {
			name      string
			got, base time.Duration
		}{{"prefill (ttft)", ttft, ttft0}, {"decode", last - ttft, last0 - ttft0}} {
			if r := float64(c.got) / float64(c.base); math.Abs(r-m) > 0.01*m {
				t.Errorf("x%v: %s %v vs %v, ratio %.4f", m, c.name, c.got, c.base, r)
			}
		}
	}
}

// TestMaxNumSeqsAndKVBlocks checks that MaxNumSeqs and KVBlocks (enginesim's
// --max-num-seqs and --kv-blocks) replace the preset's batch limit and KV
// capacity in the model the engine runs (12 requests at once: all run under
// the h100 preset's 256, 8 run and 4 wait at 8) and in what /metrics
// reports (switchyard_enginesim_max_num_seqs, num_gpu_blocks of
// vllm:cache_config_info, both over 2 replicas); and that out-of-range
// values are refused.
func TestMaxNumSeqsAndKVBlocks(t *testing.T) {
	h100, err := engine.LookupPreset("h100")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                   string
		maxNumSeqs, kvBlocks   int
		wantSeqs, wantBlocks   int
		wantRunning, wantQueue int
	}{
		{"preset", 0, 0, h100.MaxSeqs, h100.KVBlocks, 12, 0},
		{"max num seqs 8", 8, 0, 8, h100.KVBlocks, 8, 4},
		{"kv blocks 5000", 0, 5000, h100.MaxSeqs, 5000, 12, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{GPUClass: "h100", MaxNumSeqs: tc.maxNumSeqs, KVBlocks: tc.kvBlocks}
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 12 {
				if err := s.eng.Submit(0, engine.Request{ID: uint64(i + 1), PromptTokens: 100, OutputTokens: 50}); err != nil {
					t.Fatal(err)
				}
			}
			next, _ := s.eng.NextEvent()
			s.eng.Advance(next)
			if st := s.eng.Stats(); st.Running != tc.wantRunning || st.Waiting != tc.wantQueue || st.MaxSeqs != tc.wantSeqs || st.KVBlocksTotal != tc.wantBlocks {
				t.Errorf("running %d waiting %d max seqs %d kv blocks %d, want %d %d %d %d",
					st.Running, st.Waiting, st.MaxSeqs, st.KVBlocksTotal, tc.wantRunning, tc.wantQueue, tc.wantSeqs, tc.wantBlocks)
			}

			cfg.Replicas = 2
			_, base := start(t, cfg)
			fams := scrape(t, base)
			if got := fams["switchyard_enginesim_max_num_seqs"].GetMetric()[0].GetGauge().GetValue(); got != float64(2*tc.wantSeqs) {
				t.Errorf("switchyard_enginesim_max_num_seqs %v, want %d", got, 2*tc.wantSeqs)
			}
			var blocks string
			for _, l := range fams["vllm:cache_config_info"].GetMetric()[0].GetLabel() {
				if l.GetName() == "num_gpu_blocks" {
					blocks = l.GetValue()
				}
			}
			if want := strconv.Itoa(2 * tc.wantBlocks); blocks != want {
				t.Errorf("num_gpu_blocks %q, want %s", blocks, want)
			}
		})
	}
	for _, cfg := range []Config{{MaxNumSeqs: -1}, {MaxNumSeqs: h100.MaxBatchedTokens}, {KVBlocks: -1}, {KVBlocks: 1<<24 + 1}} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v): err %v, want ErrInvalidConfig", cfg, err)
		}
	}
}
