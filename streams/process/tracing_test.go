package process

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchyard-llm/switchyard/internal/testenv"
	"github.com/switchyard-llm/switchyard/streams"
)

// TestWindowSpans runs the processor on the embedded Kafka with a span
// recorder: every poll that completes windows makes a processor.fire span
// and its batch a processor.publish span, each naming the latest window
// end; together they cover every window the run publishes.
func TestWindowSpans(t *testing.T) {
	kc := testenv.Kafka(t)
	topics := streams.TopicsFor("spans")
	cl := ensure(t, kc, topics)
	produce(t, cl, topics, workload(t0, 20*time.Second))
	rec := tracetest.NewSpanRecorder()
	cfg := config("spans")
	cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s, stop := start(t, kc, cfg)
	lastEnd := t0.Add(15 * time.Second).UnixMilli() // the watermark reaches t0+19.75s; a window fires at end+1s
	published := func(name string) bool {
		for _, sp := range rec.Ended() {
			if sp.Name() != name {
				continue
			}
			for _, kv := range sp.Attributes() {
				if kv.Key == "switchyard.window_end_unix_ms" && kv.Value.AsInt64() == lastEnd {
					return true
				}
			}
		}
		return false
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return published("processor.publish") }, "a processor.publish span for the last complete window")
	stop()
	if !published("processor.fire") {
		t.Error("no processor.fire span for the last complete window")
	}
	var windows int64
	for _, sp := range rec.Ended() {
		if sp.Name() != "processor.fire" {
			continue
		}
		for _, kv := range sp.Attributes() {
			if kv.Key == "switchyard.windows" {
				windows += kv.Value.AsInt64()
			}
		}
	}
	if fired := int64(s.Stats().WindowsFired); windows != fired {
		t.Errorf("processor.fire spans count %d windows, the processor fired %d", windows, fired)
	}
}
