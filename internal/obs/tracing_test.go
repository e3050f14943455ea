package obs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"
)

// TestTracerProviderFromEnvironment: no OTEL_* variables or an explicit
// "none" make no spans; an unknown exporter is an error; an OTLP endpoint
// gets the spans, batched, by the time shutdown returns.
func TestTracerProviderFromEnvironment(t *testing.T) {
	ctx := context.Background()
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for name, kv := range map[string]map[string]string{
		"nothing set": {},
		"none":        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"},
		"disabled":    {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"},
	} {
		tp, shutdown, err := TracerProvider(ctx, "test", env(kv))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, ok := tp.(noop.TracerProvider); !ok {
			t.Errorf("%s: %T, want no spans", name, tp)
		}
		if err := shutdown(ctx); err != nil {
			t.Errorf("%s: shutdown: %v", name, err)
		}
	}
	if _, _, err := TracerProvider(ctx, "test", env(map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"})); err == nil {
		t.Error("unknown exporter accepted")
	}

	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL) // read by the exporter itself
	tp, shutdown, err := TracerProvider(ctx, "test", env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(ctx, "one")
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if posts.Load() == 0 {
		t.Fatal("the OTLP endpoint got no spans")
	}
}
