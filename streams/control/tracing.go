package control

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracerName is the instrumentation scope of the loop's spans.
const tracerName = "github.com/switchyard-llm/switchyard/streams/control"

// tracer returns the loop's tracer (a no-op one without a provider).
func (c Config) tracer() trace.Tracer {
	if c.TracerProvider == nil {
		return noop.NewTracerProvider().Tracer(tracerName)
	}
	return c.TracerProvider.Tracer(tracerName)
}

// endSpan ends span, marking it failed with err when err is not nil.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// startSpan starts a child span of ctx named name.
func (o *Optimizer) startSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return o.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}
