package control

import (
	"context"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/schemas"
)

// TestRoundSetsPlanGauges: a published round sets the per-cluster and
// per-engine gauges to the snapshot's values (weights summing to one per
// cluster, seconds for latencies), and the next snapshot replaces them
// (an engine it no longer routes to has no weight series left).
func TestRoundSetsPlanGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	st := &memStore{}
	o := &Optimizer{cfg: Config{}, store: st, log: slog.New(slog.DiscardHandler), m: m, tracer: Config{}.tracer()}
	planner := plan.NewPlanner(plan.Settings{})
	end := time.UnixMilli(1_700_000_000_000)
	o.round(context.Background(), planner, end, []*schemas.Estimate{
		engineEst("b-0", "region-b", 100, end), engineEst("c-0", "region-c", 80, end), demandEst("region-b", 120, end)})
	if st.last == nil {
		t.Fatal("nothing published")
	}
	cw := st.last.GetClusters()[0]
	var sum float64
	for _, w := range cw.GetWeights() {
		got := value(t, m.weight.WithLabelValues("region-b", w.GetEngineId()))
		if got != w.GetWeight() {
			t.Errorf("weight{region-b,%s} = %v, snapshot says %v", w.GetEngineId(), got, w.GetWeight())
		}
		sum += got
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("weights of region-b sum to %v", sum)
	}
	if got := value(t, m.expected.WithLabelValues("region-b")); math.Abs(got-cw.GetExpectedLatencyMs()/1000) > 1e-12 || got <= 0 {
		t.Errorf("expected latency %v s, snapshot says %v ms", got, cw.GetExpectedLatencyMs())
	}
	if got := value(t, m.objective); math.Abs(got-st.last.GetStats().GetObjectiveMs()/1000) > 1e-12 {
		t.Errorf("objective %v s, snapshot says %v ms", got, st.last.GetStats().GetObjectiveMs())
	}
	if got := value(t, m.demand.WithLabelValues("region-b")); got != cw.GetDemandRps() {
		t.Errorf("demand %v, snapshot says %v", got, cw.GetDemandRps())
	}

	// A later window has only b-0: c-0's weight series goes.
	next := end.Add(5 * time.Minute) // past the estimate TTL: c-0 is forgotten
	o.round(context.Background(), planner, next, []*schemas.Estimate{engineEst("b-0", "region-b", 200, next), demandEst("region-b", 50, next)})
	if n := count(m.weight); n != 1 {
		t.Errorf("%d weight series after a plan with one engine, want 1", n)
	}
}

// value reads a gauge's value.
func value(t *testing.T, g prometheus.Metric) float64 {
	t.Helper()
	var pb dto.Metric
	if err := g.Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetGauge().GetValue()
}

// count is the number of series c collects.
func count(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}
