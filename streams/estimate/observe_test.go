package estimate

import (
	"testing"

	"github.com/switchyard-llm/switchyard/schemas"
)

func TestSignalObsIsWhatTheFitSees(t *testing.T) {
	s := &schemas.EngineSignal{
		GpuClass: "a100", ReadyReplicas: 2, MaxBatch: 8, RunningRequests: 4, KvCacheUsage: 0.1,
		TtftSeconds: &schemas.Histogram{Count: 4, Sum: 0.2},
	}
	o, ok := SignalObs(s, TTFT)
	if !ok || o.Utilization != 0.25 || o.LatencyMs != 50 || o.Weight != 4 {
		t.Fatalf("TTFT obs = %+v, %v; want utilization 0.25, 50 ms, weight 4", o, ok)
	}
	if _, ok := SignalObs(s, TBOT); ok {
		t.Fatal("TBOT obs from a signal without a TBOT histogram")
	}
}
