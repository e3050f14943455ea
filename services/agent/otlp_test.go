package agent

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/internal/testenv"
)

// TestCommandExportsOTLP runs `switchyard agent` with only the standard
// OTEL_* variables set: a local OTLP/HTTP endpoint receives the agent's
// Prometheus series, pushed every OTEL_METRIC_EXPORT_INTERVAL, under
// service.name switchyard-agent.
func TestCommandExportsOTLP(t *testing.T) {
	var (
		mu      sync.Mutex
		names   []string
		service string
	)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req colmetrics.ExportMetricsServiceRequest
		if r.URL.Path != "/v1/metrics" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "not OTLP metrics", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rm := range req.GetResourceMetrics() {
			for _, kv := range rm.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					names = append(names, m.GetName())
				}
			}
		}
	}))
	defer sink.Close()
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable) // a failing scrape is counted too
	}))
	defer engine.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	kc := testenv.Kafka(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Command().Run(ctx, []string{"--engines", "e1=" + engine.URL + ",region=r,gpu=h100", "--interval", "50ms",
			"--kafka-brokers", kc.ListenAddrs()[0], "--metrics-listen", ""}, io.Discard, io.Discard)
	}()
	testenv.Eventually(t, 15*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(names, "switchyard_agent_scrapes_total")
	}, "the agent's series pushed by OTLP")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if service != "switchyard-agent" {
		t.Errorf("service.name %q, want switchyard-agent", service)
	}
}
