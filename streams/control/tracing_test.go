package control

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
)

// memStore is a Store in memory whose Publish fails with err.
type memStore struct {
	err  error
	last *schemas.WeightSnapshot
}

func (s *memStore) Get(context.Context, string) (*schemas.WeightSnapshot, error) {
	return nil, errors.New("none")
}

func (s *memStore) Publish(_ context.Context, snap *schemas.WeightSnapshot) error {
	if s.err == nil {
		s.last = snap
	}
	return s.err
}

// TestRoundSpans: a planned window makes an optimizer.round span whose
// children are optimizer.solve and optimizer.publish, carrying the
// window end and the snapshot version; a failed publish marks the round
// and the publish span as errors.
func TestRoundSpans(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pubErr  error
		wantErr bool
	}{{"published", nil, false}, {"publish fails", errors.New("nats down"), true}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			cfg := Config{TracerProvider: tp}
			cfg.defaults()
			m, err := newMetrics(nil)
			if err != nil {
				t.Fatal(err)
			}
			st := &memStore{err: tc.pubErr}
			o := &Optimizer{cfg: cfg, store: st, log: slog.New(slog.DiscardHandler), m: m, tracer: cfg.tracer()}
			end := time.UnixMilli(1_700_000_000_000)
			o.round(context.Background(), plan.NewPlanner(plan.Settings{}), end,
				[]*schemas.Estimate{engineEst("b-0", "region-b", 100, end), demandEst("region-b", 50, end)})

			spans := map[string]sdktrace.ReadOnlySpan{}
			for _, s := range rec.Ended() {
				spans[s.Name()] = s
			}
			round, solve, pub := spans["optimizer.round"], spans["optimizer.solve"], spans["optimizer.publish"]
			if round == nil || solve == nil || pub == nil {
				t.Fatalf("spans %v, want optimizer.round, optimizer.solve, optimizer.publish", spans)
			}
			for _, child := range []sdktrace.ReadOnlySpan{solve, pub} {
				if child.Parent().SpanID() != round.SpanContext().SpanID() {
					t.Errorf("%s is not a child of optimizer.round", child.Name())
				}
			}
			attrs := map[string]int64{}
			for _, kv := range round.Attributes() {
				attrs[string(kv.Key)] = kv.Value.AsInt64()
			}
			if attrs["switchyard.window_end_unix_ms"] != end.UnixMilli() || attrs["switchyard.snapshot_version"] != end.UnixMilli() {
				t.Errorf("round attributes %v, want window end and snapshot version %d", attrs, end.UnixMilli())
			}
			if got := round.Status().Code == codes.Error; got != tc.wantErr {
				t.Errorf("round span error %v, want %v", got, tc.wantErr)
			}
			if got := pub.Status().Code == codes.Error; got != tc.wantErr {
				t.Errorf("publish span error %v, want %v", got, tc.wantErr)
			}
			if !tc.wantErr && st.last == nil {
				t.Error("nothing published")
			}
		})
	}
}
