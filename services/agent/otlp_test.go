package agent

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/obs/obstest"
	"github.com/switchyard-llm/switchyard/internal/testenv"
)

// TestCommandExportsOTLP runs `switchyard agent` with only the standard
// OTEL_* variables set: a local OTLP/HTTP endpoint receives the agent's
// Prometheus series, pushed every OTEL_METRIC_EXPORT_INTERVAL, under
// service.name switchyard-agent.
func TestCommandExportsOTLP(t *testing.T) {
	sink := obstest.NewSink(t)
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
	testenv.Eventually(t, 15*time.Second, func() bool { return sink.HasMetric("switchyard_agent_scrapes_total") }, "the agent's series pushed by OTLP")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if svc := sink.Services(); len(svc) == 0 || slices.ContainsFunc(svc, func(s string) bool { return s != "switchyard-agent" }) {
		t.Errorf("service.name %q, want switchyard-agent", svc)
	}
}
