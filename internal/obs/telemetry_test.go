package obs

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpSink is a local OTLP/HTTP endpoint that decodes what it receives.
type otlpSink struct {
	mu      sync.Mutex
	metrics []string // metric names
	spans   []string // span names
	service []string // service.name of every resource
}

func (s *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/v1/metrics":
		var req colmetrics.ExportMetricsServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rm := range req.GetResourceMetrics() {
			for _, kv := range rm.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					s.service = append(s.service, kv.GetValue().GetStringValue())
				}
			}
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					s.metrics = append(s.metrics, m.GetName())
				}
			}
		}
	case "/v1/traces":
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					s.spans = append(s.spans, sp.GetName())
				}
			}
		}
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// TestTelemetryExportsSpansAndRegistryMetrics: with only
// OTEL_EXPORTER_OTLP_ENDPOINT set, a local OTLP/HTTP endpoint receives the
// service's spans and every series of its Prometheus registry (decoded
// from the protobuf requests), under service.name from OTEL_SERVICE_NAME.
func TestTelemetryExportsSpansAndRegistryMetrics(t *testing.T) {
	sink := &otlpSink{}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_SERVICE_NAME": "switchyard-test-x"}
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
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, want := range []string{"switchyard_test_things_total", "switchyard_test_wait_seconds"} {
		if !slices.Contains(sink.metrics, want) {
			t.Errorf("metric %s not exported; got %q", want, sink.metrics)
		}
	}
	if !slices.Contains(sink.spans, "window.fire") {
		t.Errorf("span not exported; got %q", sink.spans)
	}
	if len(sink.service) == 0 || slices.ContainsFunc(sink.service, func(s string) bool { return s != "switchyard-test-x" }) {
		t.Errorf("service.name of the metrics: %q, want switchyard-test-x", sink.service)
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
