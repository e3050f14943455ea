package engineserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/agent"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/simulator/engine"
	"github.com/switchyard-llm/switchyard/simulator/engineserver"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// TestScrapeEnginesim scrapes the real simulated engine around one
// completion and checks the signal the agent builds from each metric set:
// with vLLM's metrics only, no batch limit and one replica, as from vLLM.
func TestScrapeEnginesim(t *testing.T) {
	l4, err := engine.LookupPreset("l4")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		metrics      string
		replicas     uint32
		configured   uint32
		wantMaxBatch uint32
		wantSource   string
	}{
		{metrics: engineserver.MetricsFull, replicas: 2, wantMaxBatch: uint32(l4.MaxSeqs), wantSource: "engine_metrics"},
		{metrics: engineserver.MetricsVLLM, replicas: 1, wantMaxBatch: 0},
		{metrics: engineserver.MetricsVLLM, replicas: 1, configured: 16, wantMaxBatch: 16, wantSource: "configured"},
	} {
		t.Run(fmt.Sprintf("%s_max_batch_%d", tc.metrics, tc.configured), func(t *testing.T) {
			sim, err := engineserver.New(engineserver.Config{ID: "sim", GPUClass: "l4", Replicas: 2, TimeScale: 20, DefaultMaxTokens: 8, Metrics: tc.metrics})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- sim.Drive(ctx) }()
			defer func() { cancel(); <-done }()
			srv := httptest.NewServer(sim.Handler())
			defer srv.Close()

			s := agent.NewScraper(agent.Target{ID: "sim", URL: srv.URL, Region: "us", GPUClass: "l4", MaxBatch: tc.configured}, srv.Client())
			if _, err := s.Scrape(ctx, time.Unix(100, 0)); err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Post(srv.URL+"/v1/completions", "application/json",
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
			if sig.GetHealth() != schemas.Health_HEALTH_HEALTHY || sig.GetReadyReplicas() != tc.replicas || sig.GetMaxBatch() != tc.wantMaxBatch || sig.GetMaxBatchSource() != tc.wantSource {
				t.Errorf("health %v, replicas %d (want %d), max batch %d from %q (want %d from %q)",
					sig.GetHealth(), sig.GetReadyReplicas(), tc.replicas, sig.GetMaxBatch(), sig.GetMaxBatchSource(), tc.wantMaxBatch, tc.wantSource)
			}
			if sig.GetRequestsFinished() != 1 || sig.GetTtftSeconds().GetCount() != 1 || sig.GetGenerationTokens() == 0 || sig.GetPromptTokens() == 0 {
				t.Errorf("deltas after one request: %v", sig)
			}
			if sig.GetModel() == "" {
				t.Error("no model name")
			}
		})
	}
}
