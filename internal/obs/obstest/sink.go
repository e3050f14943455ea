// Package obstest is a local OTLP/HTTP endpoint for tests: it decodes the
// trace and metric export requests it receives.
package obstest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Sink is a running OTLP/HTTP endpoint; URL is its base URL (what
// OTEL_EXPORTER_OTLP_ENDPOINT takes).
type Sink struct {
	URL string

	mu       sync.Mutex
	metrics  []string
	spans    []string
	services []string
}

// NewSink starts a sink closed when t ends.
func NewSink(t testing.TB) *Sink {
	t.Helper()
	s := &Sink{}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// ServeHTTP decodes /v1/metrics and /v1/traces; anything else is a 404,
// and a body that is not the protobuf request a 400.
func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
					s.services = append(s.services, kv.GetValue().GetStringValue())
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
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					s.services = append(s.services, kv.GetValue().GetStringValue())
				}
			}
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

// HasMetric reports whether a metric named name was received.
func (s *Sink) HasMetric(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.metrics, name)
}

// HasSpan reports whether a span named name was received.
func (s *Sink) HasSpan(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.spans, name)
}

// Metrics returns the metric names received, in order.
func (s *Sink) Metrics() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.metrics)
}

// Spans returns the span names received, in order.
func (s *Sink) Spans() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.spans)
}

// Services returns the service.name of every resource received.
func (s *Sink) Services() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.services)
}
