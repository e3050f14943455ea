package obs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	prombridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
)

// MeterProvider returns the meter provider a service pushes its metrics
// with, configured by the standard variables (getenv: os.Getenv when nil)
// as TracerProvider is for spans:
//
//   - OTEL_SDK_DISABLED=true, or OTEL_METRICS_EXPORTER=none: no export;
//   - OTEL_METRICS_EXPORTER=otlp, or an OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: OTLP over HTTP/protobuf every
//     OTEL_METRIC_EXPORT_INTERVAL (default 60 s) to that endpoint;
//   - nothing set: no export.
//
// What is pushed is everything g gathers (the service's Prometheus
// registry, the same series /metrics serves), bridged into OpenTelemetry
// metrics, so the two views never differ. shutdown pushes once more and
// stops; call it before exiting.
func MeterProvider(ctx context.Context, service string, g prometheus.Gatherer, getenv func(string) string) (mp metric.MeterProvider, shutdown func(context.Context) error, err error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	none := func(context.Context) error { return nil }
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_METRICS_EXPORTER")))
	switch {
	case strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true"), exporter == "none":
		return metricnoop.NewMeterProvider(), none, nil
	case exporter == "otlp", getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "", getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "":
	case exporter == "":
		return metricnoop.NewMeterProvider(), none, nil
	default:
		return nil, nil, fmt.Errorf("OTEL_METRICS_EXPORTER=%q: only otlp and none are supported", exporter)
	}
	if g == nil {
		return nil, nil, errors.New("metric export: no gatherer")
	}
	exp, err := otlpmetrichttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the OTLP metric exporter: %w", err)
	}
	res, err := serviceResource(service, getenv)
	if err != nil {
		return nil, nil, err
	}
	reader := sdkmetric.NewPeriodicReader(exp, sdkmetric.WithProducer(prombridge.NewMetricProducer(prombridge.WithGatherer(g))))
	p := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	return p, p.Shutdown, nil
}

// serviceResource is the resource of a service's spans and metrics:
// service.name is OTEL_SERVICE_NAME, else "switchyard-"+service; the
// default resource adds OTEL_RESOURCE_ATTRIBUTES.
func serviceResource(service string, getenv func(string) string) (*resource.Resource, error) {
	name := getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "switchyard-" + service
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", name)))
	if err != nil {
		return nil, fmt.Errorf("building the telemetry resource: %w", err)
	}
	return res, nil
}

// Telemetry is a service's OpenTelemetry export: its spans and its
// Prometheus metrics, each sent by OTLP when the OTEL_* variables say so
// (see TracerProvider and MeterProvider), nothing otherwise.
type Telemetry struct {
	// TracerProvider makes the service's spans (a no-op one when spans
	// are not exported).
	TracerProvider trace.TracerProvider
	// MeterProvider pushes the gathered metrics (a no-op one when metrics
	// are not exported).
	MeterProvider metric.MeterProvider

	shutdown []func(context.Context) error
}

// StartTelemetry configures trace and metric export for service from the
// environment (getenv: os.Getenv when nil); g is the registry whose
// metrics are pushed. An OTEL_* value it cannot honour is an error.
func StartTelemetry(ctx context.Context, service string, g prometheus.Gatherer, getenv func(string) string) (*Telemetry, error) {
	tp, stopTraces, err := TracerProvider(ctx, service, getenv)
	if err != nil {
		return nil, err
	}
	mp, stopMetrics, err := MeterProvider(ctx, service, g, getenv)
	if err != nil {
		_ = stopTraces(ctx)
		return nil, err
	}
	return &Telemetry{TracerProvider: tp, MeterProvider: mp, shutdown: []func(context.Context) error{stopTraces, stopMetrics}}, nil
}

// Shutdown flushes the pending spans and pushes the metrics a last time.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("flushing telemetry: %w", err)
	}
	return nil
}

// Close is Shutdown for a deferred call at the end of a command: it
// gives the flush 5 s even when ctx is already done, and logs a failure
// to log.
func (t *Telemetry) Close(ctx context.Context, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(sctx); err != nil {
		log.Warn("flushing telemetry", "err", err)
	}
}
