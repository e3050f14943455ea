package engineserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

// TestMain checks no goroutine outlives the tests, but zmq4's PUB writer:
// a PUB socket closed before its writer goroutine first waits (zmq4
// v0.17.0 signals the close once, and the writer only checks after a
// wakeup) leaves that goroutine parked, one per KV-events publisher.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

// start runs a Service on a free port until the test ends.
func start(t *testing.T, cfg Config) (*Service, string) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 20
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	return s, "http://" + s.Addr()
}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestCompletions(t *testing.T) {
	_, base := start(t, Config{})
	tests := []struct {
		name, path, body string
		wantTokens       int
		wantFinish       string
		wantPrompt       int
	}{
		{"chat max_tokens", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"hello there"}],"max_tokens":5}`, 5, "length", estimateTokens(len("<|user|>\nhello there\n<|assistant|>\n"))},
		{"chat max_completion_tokens", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":3}`, 3, "length", estimateTokens(len("<|user|>\nhi\n<|assistant|>\n"))},
		{"chat default length", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"x"}]}`, DefaultMaxTokens, "stop", estimateTokens(len("<|user|>\nx\n<|assistant|>\n"))},
		{"completion string", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":"abcdefgh","max_tokens":2}`, 2, "length", 2},
		{"completion token ids", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":[1,2,3,4,5],"max_tokens":1}`, 1, "length", 5},
		{"prompt_tokens extension", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":"a","max_tokens":4,"switchyard":{"prompt_tokens":700}}`, 4, "length", 700},
		{"hash_ids extension", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"a"}],"max_tokens":2,"switchyard":{"hash_ids":[1,2,3]}}`, 2, "length", 1536},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, b := post(t, base+tc.path, tc.body)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, b)
			}
			var c completion
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			if len(c.Choices) != 1 || c.Usage == nil || c.Model != DefaultModel {
				t.Fatalf("response %s", b)
			}
			ch := c.Choices[0]
			text := ""
			switch {
			case ch.Message != nil:
				text = ch.Message.Content
				if ch.Message.Role != "assistant" || c.Object != "chat.completion" {
					t.Errorf("chat response %s", b)
				}
			case ch.Text != nil:
				text = *ch.Text
				if c.Object != "text_completion" {
					t.Errorf("object %q", c.Object)
				}
			}
			if got := strings.Count(text, " "); got != tc.wantTokens {
				t.Errorf("%d words in %q, want %d", got, text, tc.wantTokens)
			}
			if c.Usage.CompletionTokens != tc.wantTokens || c.Usage.PromptTokens != tc.wantPrompt ||
				c.Usage.TotalTokens != tc.wantTokens+tc.wantPrompt {
				t.Errorf("usage %+v, want %d prompt + %d completion", c.Usage, tc.wantPrompt, tc.wantTokens)
			}
			if ch.FinishReason == nil || *ch.FinishReason != tc.wantFinish {
				t.Errorf("finish reason %v, want %s", ch.FinishReason, tc.wantFinish)
			}
		})
	}
}

// sseEvents reads an SSE body into its data payloads.
func sseEvents(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	blank := true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			blank = true
			continue
		}
		if !blank || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("malformed SSE line %q", line)
		}
		blank = false
		out = append(out, strings.TrimPrefix(line, "data: "))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStreaming(t *testing.T) {
	_, base := start(t, Config{})
	tests := []struct {
		name, path, body string
		tokens           int
		usage            bool
	}{
		{"chat", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"hi"}],"max_tokens":7,"stream":true}`, 7, false},
		{"chat usage", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`, 4, true},
		{"completion one token", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":"hi","max_tokens":1,"stream":true,"stream_options":{"include_usage":true}}`, 1, true},
		{"completion", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":"hi","max_tokens":12,"stream":true}`, 12, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(base+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			evs := sseEvents(t, resp.Body)
			want := tc.tokens + 2 // tokens, finish chunk, [DONE]
			if tc.usage {
				want++
			}
			if len(evs) != want || evs[len(evs)-1] != "[DONE]" {
				t.Fatalf("got %d events ending %q, want %d ending [DONE]: %q", len(evs), evs[len(evs)-1], want, evs)
			}
			for i, data := range evs[:len(evs)-1] {
				var c completion
				if err := json.Unmarshal([]byte(data), &c); err != nil {
					t.Fatalf("event %d: %v: %s", i, err, data)
				}
				switch {
				case i < tc.tokens:
					ch := c.Choices[0]
					if ch.FinishReason != nil {
						t.Errorf("token chunk %d has a finish reason", i)
					}
					if ch.Delta != nil {
						if ch.Delta.Content == nil || (i == 0) != (ch.Delta.Role == "assistant") {
							t.Errorf("chunk %d delta %+v", i, ch.Delta)
						}
					} else if ch.Text == nil || *ch.Text == "" {
						t.Errorf("chunk %d has no text", i)
					}
				case i == tc.tokens:
					if len(c.Choices) != 1 || c.Choices[0].FinishReason == nil || *c.Choices[0].FinishReason != "length" {
						t.Errorf("final chunk %s", data)
					}
				default:
					if len(c.Choices) != 0 || c.Usage == nil || c.Usage.CompletionTokens != tc.tokens {
						t.Errorf("usage chunk %s", data)
					}
				}
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	_, base := start(t, Config{GPUClass: "l4"})
	long := strings.Repeat("x", 4*20000)
	tests := []struct {
		name, method, path, body string
		status                   int
	}{
		{"invalid json", "POST", "/v1/chat/completions", `{"model":`, 400},
		{"trailing data", "POST", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"a"}]} {}`, 400},
		{"n 0", "POST", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"a"}],"n":0}`, 400},
		{"logprobs not a bool", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"logprobs":3}`, 400},
		{"top_logprobs without logprobs", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"top_logprobs":3}`, 400},
		{"embeddings without input", "POST", "/v1/embeddings", `{"model":"switchyard-sim-8b"}`, 400},
		{"embeddings unknown model", "POST", "/v1/embeddings", `{"model":"gpt-9","input":"a"}`, 404},
		{"embeddings bad dimensions", "POST", "/v1/embeddings", `{"input":"a","dimensions":0}`, 400},
		{"rerank without query", "POST", "/v1/rerank", `{"documents":["a"]}`, 400},
		{"score lengths differ", "POST", "/v1/score", `{"text_1":["a","b"],"text_2":["a","b","c"]}`, 400},
		{"tokenize nothing", "POST", "/tokenize", `{}`, 400},
		{"detokenize bad id", "POST", "/detokenize", `{"tokens":[-1]}`, 400},
		{"embeddings by GET", "GET", "/v1/embeddings", ``, 405},
		{"unknown model", "POST", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"a"}]}`, 404},
		{"no messages", "POST", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[]}`, 400},
		{"no role", "POST", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"content":"a"}]}`, 400},
		{"bad content", "POST", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":7}]}`, 400},
		{"zero max_tokens", "POST", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"a"}],"max_tokens":0}`, 400},
		{"huge max_tokens", "POST", "/v1/chat/completions", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"a"}],"max_tokens":100000000}`, 400},
		{"prompt too long", "POST", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":"` + long + `"}`, 400},
		{"stream_options without stream", "POST", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":"a","stream_options":{"include_usage":true}}`, 400},
		{"no prompt", "POST", "/v1/completions", `{"model":"switchyard-sim-8b"}`, 400},
		{"batched prompt", "POST", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":["a","b"]}`, 400},
		{"bad prompt type", "POST", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":{"a":1}}`, 400},
		{"negative prompt_tokens", "POST", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":"a","switchyard":{"prompt_tokens":-1}}`, 400},
		{"bad hash block", "POST", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":"a","switchyard":{"hash_ids":[1],"hash_block_tokens":-5}}`, 400},
		{"oversized body", "POST", "/v1/completions", `{"model":"switchyard-sim-8b","prompt":"` + strings.Repeat("y", maxBodyBytes) + `"}`, 413},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405},
		{"unknown path", "GET", "/v2/nothing", ``, 404},
		{"bad fault", "POST", "/admin/fault", `{"error_rate":2}`, 400},
		{"bad fault json", "POST", "/admin/fault", `{`, 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			var e errorBody
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("not an OpenAI error (%v): %s", err, b)
			}
		})
	}
}

func TestModelsHealthAndFaults(t *testing.T) {
	s, base := start(t, Config{Model: "m1"})
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var ml modelList
	err = json.NewDecoder(resp.Body).Decode(&ml)
	resp.Body.Close()
	if err != nil || len(ml.Data) != 1 || ml.Data[0].ID != "m1" || ml.Object != "list" {
		t.Fatalf("models: %v %+v", err, ml)
	}
	health := func() int {
		resp, err := http.Get(base + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	chat := `{"model":"m1","messages":[{"role":"user","content":"a"}],"max_tokens":1}`
	if got := health(); got != 200 {
		t.Fatalf("health %d", got)
	}
	if code, b := post(t, base+"/admin/fault", `{"unhealthy":true}`); code != 200 || !strings.Contains(string(b), `"unhealthy":true`) {
		t.Fatalf("fault: %d %s", code, b)
	}
	if got := health(); got != 503 {
		t.Fatalf("unhealthy health %d", got)
	}
	if code, _ := post(t, base+"/v1/chat/completions", chat); code != 200 {
		t.Fatalf("unhealthy engine still serves, got %d", code)
	}
	if code, _ := post(t, base+"/admin/fault", `{"error_rate":1}`); code != 200 {
		t.Fatal(code)
	}
	if f := s.Fault(); f.ErrorRate != 1 || !f.Unhealthy {
		t.Fatalf("fault %+v, want both set", f)
	}
	if code, b := post(t, base+"/v1/chat/completions", chat); code != 500 || !strings.Contains(string(b), "server_error") {
		t.Fatalf("error_rate 1 gave %d %s", code, b)
	}
	if code, _ := post(t, base+"/admin/fault", `{"error_rate":0,"unhealthy":false}`); code != 200 {
		t.Fatal(code)
	}
	if got := health(); got != 200 {
		t.Fatalf("health after reset %d", got)
	}
	if code, _ := post(t, base+"/v1/chat/completions", chat); code != 200 {
		t.Fatalf("after reset got %d", code)
	}
}

func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func TestMetricsAndPrefixCache(t *testing.T) {
	s, base := start(t, Config{GPUClass: "a100", Replicas: 2})
	// The same 4000-character conversation twice: the second prefills
	// only its tail.
	conv := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 90)
	body := `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"` + conv + `"}],"max_tokens":8}`
	var cached []int
	for range 2 {
		code, b := post(t, base+"/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("status %d: %s", code, b)
		}
		var c completion
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		cached = append(cached, c.Usage.PromptTokensDetails.CachedTokens)
	}
	if cached[0] != 0 || cached[1] < 900 {
		t.Errorf("cached tokens %v, want 0 then most of ~1000", cached)
	}
	// The response is written as the model finishes the request; the
	// driver publishes its stats and metrics after that step, so wait for
	// them rather than race the driver.
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Finished != 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := s.Stats(); st.PrefixHitTokens != int64(cached[1]) || st.Finished != 2 {
		t.Errorf("stats %+v", st)
	}
	fams := scrape(t, base)
	want := map[string]dto.MetricType{
		"vllm:num_requests_running":         dto.MetricType_GAUGE,
		"vllm:num_requests_waiting":         dto.MetricType_GAUGE,
		"vllm:kv_cache_usage_perc":          dto.MetricType_GAUGE,
		"vllm:prefix_cache_hits":            dto.MetricType_COUNTER,
		"vllm:prefix_cache_queries":         dto.MetricType_COUNTER,
		"vllm:prompt_tokens":                dto.MetricType_COUNTER,
		"vllm:generation_tokens":            dto.MetricType_COUNTER,
		"vllm:request_success":              dto.MetricType_COUNTER,
		"vllm:time_to_first_token_seconds":  dto.MetricType_HISTOGRAM,
		"vllm:inter_token_latency_seconds":  dto.MetricType_HISTOGRAM,
		"vllm:e2e_request_latency_seconds":  dto.MetricType_HISTOGRAM,
		"vllm:request_queue_time_seconds":   dto.MetricType_HISTOGRAM,
		"vllm:request_prefill_time_seconds": dto.MetricType_HISTOGRAM,
		"vllm:cache_config_info":            dto.MetricType_GAUGE,
		"switchyard_enginesim_max_num_seqs": dto.MetricType_GAUGE,
	}
	for name, typ := range want {
		f, ok := fams[name]
		if !ok {
			// The parser keeps a counter's _total suffix in older formats.
			f, ok = fams[name+"_total"]
		}
		if !ok {
			t.Errorf("missing %s", name)
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s type %v, want %v", name, f.GetType(), typ)
		}
		if lbl := label(f.Metric[0], "model_name"); lbl != DefaultModel {
			t.Errorf("%s model_name %q", name, lbl)
		}
	}
	value := func(name string) float64 {
		f := fams[name]
		if f == nil {
			f = fams[name+"_total"]
		}
		m := f.Metric[0]
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		}
		return float64(m.Histogram.GetSampleCount())
	}
	checks := map[string]float64{
		"vllm:prefix_cache_hits":            float64(cached[1]),
		"vllm:generation_tokens":            16,
		"vllm:request_success":              2,
		"vllm:time_to_first_token_seconds":  2,
		"vllm:inter_token_latency_seconds":  14,
		"vllm:e2e_request_latency_seconds":  2,
		"switchyard_enginesim_max_num_seqs": 256,
		"vllm:num_requests_running":         0,
	}
	for name, v := range checks {
		if got := value(name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	var bounds []float64
	for _, b := range fams["vllm:time_to_first_token_seconds"].Metric[0].Histogram.Bucket {
		bounds = append(bounds, b.GetUpperBound())
	}
	if len(bounds) != len(ttftBuckets())+1 {
		t.Errorf("ttft buckets %v", bounds)
	}
	if got := label(fams["vllm:cache_config_info"].Metric[0], "num_gpu_blocks"); got != "18000" {
		t.Errorf("num_gpu_blocks %q", got)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestDisconnectFreesSlot(t *testing.T) {
	s, base := start(t, Config{GPUClass: "l4", TimeScale: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"hi"}],"max_tokens":5000,"stream":true}`
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	if st := s.Stats(); st.Running != 1 {
		t.Fatalf("running %d, want 1", st.Running)
	}
	cancel()
	waitFor(t, func() bool { st := s.Stats(); return st.Running == 0 && st.Canceled == 1 && st.KVBlocksUsed == 0 })
}

func TestExtraRegistererAndShutdown(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(Config{ID: "e1", Listen: "127.0.0.1:0", Registerer: reg, TimeScale: 50})
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() != "" {
		t.Fatal("address before listening")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-s.Ready()
	// A request in flight at shutdown finishes within the grace period.
	result := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+s.Addr()+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"switchyard-sim-8b","prompt":"a","max_tokens":200}`))
		if err != nil {
			result <- -1
			return
		}
		resp.Body.Close()
		result <- resp.StatusCode
	}()
	waitFor(t, func() bool { return s.Stats().Running == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := <-result; got != 200 {
		t.Fatalf("in-flight request got %d", got)
	}
	http.DefaultClient.CloseIdleConnections()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fams {
		if f.GetName() == "vllm:num_requests_running" {
			found = label(f.Metric[0], "engine") == "e1"
		}
	}
	if !found {
		t.Fatal("extra registerer lacks vllm:num_requests_running{engine=\"e1\"}")
	}
	// After Drive stops, completions fail cleanly.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"model":"switchyard-sim-8b","prompt":"a"}`))
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 503 {
		t.Fatalf("after stop got %d", rec.Code)
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"gpu class", Config{GPUClass: "tpu"}},
		{"replicas", Config{Replicas: -2}},
		{"time scale", Config{TimeScale: -1}},
		{"max tokens", Config{DefaultMaxTokens: 1 << 30}},
		{"id", Config{ID: "\xff"}},
		{"metrics", Config{Metrics: "prometheus"}},
		{"latency multiplier", Config{LatencyMultiplier: -1}},
		{"latency multiplier too large", Config{LatencyMultiplier: 1e4}},
		{"latency multiplier nan", Config{LatencyMultiplier: math.NaN()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}

// TestBadInputMessagesForClients: errors name the field and the value,
// never a Go type, and a max_tokens near the int range does not wrap the
// requested total to a negative count.
func TestBadInputMessagesForClients(t *testing.T) {
	_, base := start(t, Config{GPUClass: "l4"})
	tests := []struct {
		name, body, param, want string
	}{
		{"max_tokens over int64", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"a"}],"max_tokens":99999999999999999999}`, "max_tokens", "number 99999999999999999999"},
		{"max_tokens max int64", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":"a"}],"max_tokens":9223372036854775807}`, "messages", "requested 9223372036854775807 tokens"},
		{"content parts not objects", `{"model":"switchyard-sim-8b","messages":[{"role":"user","content":[1,2]}]}`, "messages[0].content", "array of content part objects"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			msg := e.Error.Message
			if resp.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != tc.param || !strings.Contains(msg, tc.want) ||
				strings.Contains(msg, "Go ") || strings.Contains(msg, "engineserver.") || strings.Contains(msg, "-9223372036854775808") {
				t.Fatalf("%d param %v %q, want 400 param %s containing %q", resp.StatusCode, e.Error.Param, msg, tc.param, tc.want)
			}
		})
	}
}
