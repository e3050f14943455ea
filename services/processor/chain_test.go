package processor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/agent"
	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
	"github.com/switchyard-llm/switchyard/streams/process"
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
	if err := streams.EnsureTopics(context.Background(), testenv.Client(t, kc), topics, 3); err != nil {
		t.Fatal(err)
	}
	ag, err := agent.New(testenv.Client(t, kc, agent.ClientOpts()...), agent.Config{
		Engines:  []agent.Target{{ID: "sim-1", URL: srv.URL, Region: "us", GPUClass: "h100"}},
		Interval: 50 * time.Millisecond, TopicPrefix: "chain",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agentDone := make(chan error, 1)
	go func() { agentDone <- ag.Run(ctx) }()
	defer func() { cancel(); <-agentDone }()

	cfg := process.Config{TopicPrefix: "chain", Group: "proc-chain",
		Window: time.Second, Slide: 500 * time.Millisecond, AllowedLateness: 100 * time.Millisecond}
	p, err := process.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pcl := testenv.Client(t, kc, p.ClientOpts()...)
	procCtx, stopProc := context.WithCancel(ctx)
	procDone := make(chan error, 1)
	go func() { procDone <- p.Run(procCtx, pcl) }()

	est := testenv.Client(t, kc, kgo.ConsumeTopics(topics.Estimates), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	found := false
	testenv.Eventually(t, 15*time.Second, func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer pcancel()
		est.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			e, err := estimate.DecodeEstimate(r.Value)
			if err == nil && e.GetEngine().GetEngineId() == "sim-1" && e.GetEngine().GetObservedRps() > 0 && e.GetEngine().GetTtftProfile().GetSamples() > 0 {
				found = true
			}
		})
		return found
	}, "engine estimate from scraped signals")
	stopProc()
	if err := <-procDone; err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.SignalsConsumed == 0 || st.EstimatesPublished == 0 {
		t.Errorf("processor stats %+v", st)
	}
}
