package obs

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/switchyard-llm/switchyard/internal/obs/obstest"
)

// TestTelemetryExportsSpansAndRegistryMetrics: with only
// OTEL_EXPORTER_OTLP_ENDPOINT set, a local OTLP/HTTP endpoint receives the
// service's spans and every series of its Prometheus registry (decoded
// from the protobuf requests), under service.name from OTEL_SERVICE_NAME.
func TestTelemetryExportsSpansAndRegistryMetrics(t *testing.T) {
	sink := obstest.NewSink(t)
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": sink.URL, "OTEL_SERVICE_NAME": "switchyard-test-x"}
	for k, v := range env {
		t.Setenv(k, v) // read by the exporters themselves
	}
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_test_things_total", Help: "Things."})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "switchyard_test_wait_seconds", Help: "Waits."})
	reg.MustRegister(c, h)
	c.Add(3)
	h.Observe(0.2)

	ctx := context.Background()
	tel, err := StartTelemetry(ctx, "test", reg, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.TracerProvider.Tracer("t").Start(ctx, "window.fire")
	span.End()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for _, want := range []string{"switchyard_test_things_total", "switchyard_test_wait_seconds"} {
		if !sink.HasMetric(want) {
			t.Errorf("metric %s not exported; got %q", want, sink.Metrics())
		}
	}
	if !sink.HasSpan("window.fire") {
		t.Errorf("span not exported; got %q", sink.Spans())
	}
	if svc := sink.Services(); len(svc) == 0 || slices.ContainsFunc(svc, func(s string) bool { return s != "switchyard-test-x" }) {
		t.Errorf("service.name of the spans and metrics: %q, want switchyard-test-x", svc)
	}
}

// TestMeterProviderFromEnvironment: no variables, "none" or a disabled
// SDK push nothing; an unknown exporter is an error.
func TestMeterProviderFromEnvironment(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	for name, kv := range map[string]map[string]string{
		"nothing set": {},
		"none":        {"OTEL_METRICS_EXPORTER": "none", "OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"},
		"disabled":    {"OTEL_SDK_DISABLED": "true", "OTEL_METRICS_EXPORTER": "otlp"},
	} {
		tel, err := StartTelemetry(ctx, "test", reg, func(k string) string { return kv[k] })
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, ok := tel.MeterProvider.(metricnoop.MeterProvider); !ok {
			t.Errorf("%s: %T, want no metric export", name, tel.MeterProvider)
		}
		if _, ok := tel.TracerProvider.(tracenoop.TracerProvider); !ok {
			t.Errorf("%s: %T, want no spans", name, tel.TracerProvider)
		}
		if err := tel.Shutdown(ctx); err != nil {
			t.Errorf("%s: shutdown: %v", name, err)
		}
	}
	if _, err := StartTelemetry(ctx, "test", reg, func(k string) string {
		return map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}[k]
	}); err == nil {
		t.Error("unknown metrics exporter accepted")
	}
}

// TestServeMetricsHealth: the metrics listener answers /metrics with the
// registry and /health with 200 (the probe of services with no API).
func TestServeMetricsHealth(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_test_up", Help: "Up."}))
	addr, stop, err := ServeMetrics(context.Background(), "127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for path, want := range map[string]string{"/health": "ok\n", "/metrics": "switchyard_test_up 0"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d %q, want 200 containing %q", path, resp.StatusCode, b, want)
		}
	}
}
