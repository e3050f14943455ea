package obs

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerProvider returns the tracer provider a service exports its spans
// with, configured as OpenTelemetry SDKs are, by the standard variables
// (getenv: os.Getenv when nil):
//
//   - OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none: no spans;
//   - OTEL_TRACES_EXPORTER=otlp, or an OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: OTLP over HTTP/protobuf, batched,
//     to that endpoint (the exporter reads the other OTEL_EXPORTER_OTLP_*
//     variables: headers, timeout, TLS); without an endpoint the
//     exporter's default, localhost:4318;
//   - nothing set: no spans (a service makes no spans nobody collects).
//
// The resource carries service.name (OTEL_SERVICE_NAME, else
// "switchyard-"+service) and OTEL_RESOURCE_ATTRIBUTES. shutdown flushes
// and stops the exporter; call it before exiting.
func TracerProvider(ctx context.Context, service string, getenv func(string) string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	none := func(context.Context) error { return nil }
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch {
	case strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true"), exporter == "none":
		return noop.NewTracerProvider(), none, nil
	case exporter == "otlp", getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "", getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
	case exporter == "":
		return noop.NewTracerProvider(), none, nil
	default:
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", exporter)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the OTLP trace exporter: %w", err)
	}
	res, err := serviceResource(service, getenv)
	if err != nil {
		return nil, nil, err
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, p.Shutdown, nil
}
