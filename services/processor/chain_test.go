package processor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/services/agent"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// TestAgentToEstimates runs a real agent scraping a vLLM-style /metrics
// into the processor and waits for an engine estimate.
func TestAgentToEstimates(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			return
		}
		k := n.Add(1)
		fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} %d\n", k%8)
		fmt.Fprintf(w, "# TYPE vllm:request_success_total counter\nvllm:request_success_total{model_name=\"m\"} %d\n", 3*k)
		fmt.Fprintf(w, "# TYPE vllm:time_to_first_token_seconds histogram\n"+
			"vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.1\"} %d\n"+
			"vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} %d\n"+
			"vllm:time_to_first_token_seconds_sum{model_name=\"m\"} %v\n"+
			"vllm:time_to_first_token_seconds_count{model_name=\"m\"} %d\n", 3*k, 3*k, 0.05*float64(3*k), 3*k)
	}))
	defer srv.Close()
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("chain")
	ensure(t, kc, topics)
	est := collect(t, kc, topics.Estimates)
	ag, err := agent.New(agent.Config{
		Engines:  []agent.Target{{ID: "sim-1", URL: srv.URL, Region: "us", GPUClass: "h100"}},
		Interval: 50 * time.Millisecond, KafkaBrokers: kc.ListenAddrs(), TopicPrefix: "chain",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	defer func() { cancel(); <-done }()
	cfg := config(kc, "chain")
	cfg.Window, cfg.Slide, cfg.AllowedLateness = time.Second, 500*time.Millisecond, 100*time.Millisecond
	p, stop := start(t, cfg)
	testenv.Eventually(t, 15*time.Second, func() bool {
		for _, r := range est.snapshot() {
			e, err := estimate.DecodeEstimate(r.Value)
			if err == nil && e.GetEngine().GetEngineId() == "sim-1" && e.GetEngine().GetObservedRps() > 0 && e.GetEngine().GetTtftProfile().GetSamples() > 0 {
				return true
			}
		}
		return false
	}, "engine estimate from scraped signals")
	stop()
	if st := p.Stats(); st.SignalsConsumed == 0 || st.EstimatesPublished == 0 {
		t.Errorf("processor stats %+v", st)
	}
}
