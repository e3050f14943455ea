package process

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// tracerName is the instrumentation scope of the processor's spans.
const tracerName = "github.com/switchyard-llm/switchyard/streams/process"

// tracer returns the processor's tracer (a no-op one without a provider).
func (c Config) tracer() trace.Tracer {
	if c.TracerProvider == nil {
		return noop.NewTracerProvider().Tracer(tracerName)
	}
	return c.TracerProvider.Tracer(tracerName)
}

// traceFire records a processor.fire span from start to now when the
// watermark completed windows (polls that fire nothing make no span).
func (r *runner) traceFire(start time.Time, fired []firedWindow) {
	if len(fired) == 0 {
		return
	}
	_, span := r.p.tracer.Start(context.Background(), "processor.fire", trace.WithTimestamp(start),
		trace.WithAttributes(attribute.Int("switchyard.windows", len(fired)),
			attribute.Int64("switchyard.window_end_unix_ms", fired[len(fired)-1].end),
			attribute.Int64("switchyard.watermark_unix_ms", r.core.Watermark().UnixMilli())))
	span.End()
}

// startPublish starts the processor.publish span of a batch that carries
// fired windows; end ends it, marking it failed with a non-nil error.
func (r *runner) startPublish(ctx context.Context, b batch) (end func(error)) {
	if len(b.fired) == 0 {
		return func(error) {}
	}
	_, span := r.p.tracer.Start(ctx, "processor.publish",
		trace.WithAttributes(attribute.Int("switchyard.windows", len(b.fired)),
			attribute.Int64("switchyard.window_end_unix_ms", b.fired[len(b.fired)-1].end)))
	return func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
