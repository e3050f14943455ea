package engineserver_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
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
