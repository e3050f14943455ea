package enginesim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/agent"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/services/enginesim"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// TestScrapeEnginesim scrapes the real simulated engine around one
// completion and checks the signal it yields.
func TestScrapeEnginesim(t *testing.T) {
	sim, err := enginesim.New(enginesim.Config{ID: "sim", GPUClass: "l4", Replicas: 2, TimeScale: 20, DefaultMaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Drive(ctx) }()
	defer func() { cancel(); <-done }()
	srv := httptest.NewServer(sim.Handler())
	defer srv.Close()

	s := agent.NewScraper(agent.Target{ID: "sim", URL: srv.URL, Region: "us", GPUClass: "l4"}, nil)
	if _, err := s.Scrape(ctx, time.Unix(100, 0)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"switchyard-sim-8b","prompt":"hello there","max_tokens":8}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion status %d", resp.StatusCode)
	}
	sig, err := s.Scrape(ctx, time.Unix(102, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := estimate.ValidateSignal(sig, time.Time{}); err != nil {
		t.Fatalf("invalid signal from enginesim: %v", err)
	}
	if sig.GetHealth() != schemas.Health_HEALTH_HEALTHY || sig.GetReadyReplicas() != 2 || sig.GetMaxBatch() == 0 {
		t.Errorf("health/replicas/max batch: %v", sig)
	}
	if sig.GetRequestsFinished() != 1 || sig.GetTtftSeconds().GetCount() != 1 || sig.GetGenerationTokens() == 0 || sig.GetPromptTokens() == 0 {
		t.Errorf("deltas after one request: %v", sig)
	}
	if sig.GetModel() == "" {
		t.Error("no model name")
	}
}
