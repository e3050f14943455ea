package engineserver_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/agent"
	"github.com/switchyard-llm/switchyard/simulator/engineserver"
)

// TestLoRAModulesAsVLLMServesThem: an engine with two LoRA modules lists
// them in /v1/models with the base model as parent, serves requests
// naming either (404 model_not_found for another name), and the agent's
// signal from it names the three models, max_lora, and the adapter of a
// request in flight as active.
func TestLoRAModulesAsVLLMServesThem(t *testing.T) {
	sim, err := engineserver.New(engineserver.Config{ID: "sim", Model: "base", LoRAModules: []string{"sql", "law"}, MaxLoRAs: 2,
		TimeScale: 2, Metrics: engineserver.MetricsVLLM})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Drive(ctx) }()
	defer func() { cancel(); <-done }()
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()

	resp, err := srv.Client().Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"id":"base"`, `"id":"sql"`, `"id":"law"`, `"parent":"base"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/v1/models lacks %s: %s", want, b)
		}
	}
	complete := func(model string, tokens int) int {
		t.Helper()
		resp, err := srv.Client().Post(srv.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"`+model+`","prompt":"hello there","max_tokens":`+strconv.Itoa(tokens)+`}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	if code := complete("sql", 2); code != http.StatusOK {
		t.Errorf("adapter sql: status %d", code)
	}
	if code := complete("other", 2); code != http.StatusNotFound {
		t.Errorf("unknown model: status %d, want 404", code)
	}
	slow := make(chan int, 1)
	go func() { slow <- complete("law", 2000) }() // runs for a while at time scale 2
	s := agent.NewScraper(agent.Target{ID: "sim", URL: srv.URL}, srv.Client())
	deadline := time.Now().Add(10 * time.Second)
	for {
		sig, err := s.Scrape(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(sig.GetModels(), []string{"base", "law", "sql"}) || sig.GetMaxLora() != 2 {
			t.Fatalf("signal models %q max_lora %d, want [base law sql] and 2", sig.GetModels(), sig.GetMaxLora())
		}
		if slices.Equal(sig.GetActiveAdapters(), []string{"law"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("active adapters %q, want [law] while its request runs", sig.GetActiveAdapters())
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
	cancel()
	<-slow
}

// TestLoRAHitsCounted: four requests one after another on an engine with
// one adapter slot, sql, sql, law, sql, are four adapter requests and
// three loads (the second sql found its adapter loaded; law evicted it).
// Full metrics export both counters; vLLM's metrics do not (vLLM has no
// such series), and the engine's stop line in its log states them for
// runs that serve vLLM's only.
func TestLoRAHitsCounted(t *testing.T) {
	for _, metrics := range []string{engineserver.MetricsFull, engineserver.MetricsVLLM} {
		t.Run(metrics, func(t *testing.T) {
			var log syncBuffer
			sim, err := engineserver.New(engineserver.Config{ID: "sim", Listen: "127.0.0.1:0", Model: "base", LoRAModules: []string{"sql", "law"},
				MaxLoRAs: 1, TimeScale: 20, Metrics: metrics, Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- sim.Run(ctx) }()
			stop := sync.OnceValue(func() error { cancel(); return <-done })
			defer stop()
			<-sim.Ready()
			base := "http://" + sim.Addr()
			for _, model := range []string{"sql", "sql", "law", "sql"} {
				resp, err := http.Post(base+"/v1/completions", "application/json",
					strings.NewReader(`{"model":"`+model+`","prompt":"hello there","max_tokens":2}`))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: status %d", model, resp.StatusCode)
				}
			}
			resp, err := http.Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			http.DefaultClient.CloseIdleConnections()
			for _, want := range []string{`switchyard_enginesim_lora_requests_total{model_name="base"} 4`, `switchyard_enginesim_lora_loads_total{model_name="base"} 3`} {
				if got := strings.Contains(string(b), want); got != (metrics == engineserver.MetricsFull) {
					t.Errorf("/metrics has %q: %v, want %v", want, got, metrics == engineserver.MetricsFull)
				}
			}
			if err := stop(); err != nil {
				t.Fatalf("run: %v", err)
			}
			if line := log.String(); !strings.Contains(line, `msg="enginesim stopped"`) || !strings.Contains(line, "lora_requests=4 lora_loads=3") {
				t.Errorf("log lacks the stop line with lora_requests=4 lora_loads=3:\n%s", line)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
