package plan

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// capEst is one window's engine estimate: capacity and throughput (rps).
func capEst(end int64, capacity, observed float64, replicas uint32) *schemas.EngineEstimate {
	return &schemas.EngineEstimate{EngineId: "e", WindowEndUnixMs: end, CapacityRps: capacity, ObservedRps: observed,
		ReadyReplicas: replicas, Health: schemas.Health_HEALTH_HEALTHY}
}

// degraded marks e's window as partly unhealthy.
func degraded(e *schemas.EngineEstimate) *schemas.EngineEstimate {
	e.Health = schemas.Health_HEALTH_DEGRADED
	return e
}

func TestCapacityTracking(t *testing.T) {
	tests := []struct {
		name string
		ests []*schemas.EngineEstimate
		want float64
	}{
		{"first window: its estimate", []*schemas.EngineEstimate{capEst(1, 200, 50, 1)}, 200},
		{"unmeasured: follows the estimate's bound, smoothed", []*schemas.EngineEstimate{capEst(1, 200, 50, 1), capEst(2, 150, 40, 1)}, 200 + boundGain*(150-200)},
		{"measurement: halfway down", []*schemas.EngineEstimate{capEst(1, 200, 50, 1), capEst(2, 60, 60, 1)}, 130},
		{"measurement above the estimate: taken", []*schemas.EngineEstimate{capEst(1, 50, 10, 1), capEst(2, 70, 70, 1)}, 70},
		{"measured, then busy without a queue: probe above throughput, within the bound", []*schemas.EngineEstimate{capEst(1, 60, 60, 1), capEst(2, 150, 50, 1)}, 75},
		{"probe capped by the bound", []*schemas.EngineEstimate{capEst(1, 60, 60, 1), capEst(2, 70, 50, 1)}, 70},
		{"measured, then holds at light load", []*schemas.EngineEstimate{capEst(1, 60, 60, 1), capEst(2, 150, 50, 1), capEst(3, 300, 20, 1)}, 75},
		{"per replica", []*schemas.EngineEstimate{capEst(1, 200, 50, 2), capEst(2, 60, 60, 1)}, 80},
		{"repeated or older windows count once", []*schemas.EngineEstimate{capEst(2, 200, 50, 1), capEst(2, 60, 60, 1), capEst(1, 60, 60, 1)}, 200},
		{"down: forgotten, back as a new instance", []*schemas.EngineEstimate{capEst(1, 60, 60, 1), {EngineId: "e", WindowEndUnixMs: 2, Health: schemas.Health_HEALTH_UNHEALTHY}, capEst(3, 40, 0, 1)}, 40},
		{"back from down: degraded windows teach nothing, the first healthy one starts over", []*schemas.EngineEstimate{capEst(1, 60, 60, 1), {EngineId: "e", WindowEndUnixMs: 2, Health: schemas.Health_HEALTH_UNHEALTHY},
			degraded(capEst(3, 16, 0, 1)), degraded(capEst(4, 20, 5, 1)), capEst(5, 40, 10, 1)}, 40},
		{"no ready replica: forgotten", []*schemas.EngineEstimate{capEst(1, 60, 60, 1), capEst(2, 60, 0, 0), capEst(3, 40, 0, 1)}, 40},
		{"non-finite ignored", []*schemas.EngineEstimate{capEst(1, 200, 50, 1), capEst(2, math.NaN(), 60, 1), capEst(3, 60, math.Inf(1), 1)}, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s capacityState
			for _, e := range tc.ests {
				s.observe(e)
			}
			last := tc.ests[len(tc.ests)-1]
			if last.GetReadyReplicas() == 0 {
				last = tc.ests[0]
			}
			lo, hi := s.capacity(last, 0)
			if math.Abs(hi-tc.want) > 1e-9 || !finite(hi) {
				t.Fatalf("capacity %v, want %v", hi, tc.want)
			}
			wantLo := tc.want
			if !s.measured {
				wantLo = unmeasuredHeadroom * tc.want
			}
			if math.Abs(lo-wantLo) > 1e-9 {
				t.Fatalf("planned-on capacity %v, want %v", lo, wantLo)
			}
		})
	}
}

// TestInstanceUsesTrackedCapacity: an engine whose per-window estimate
// alternates between an occupancy guess (200) and a measurement (60) is
// planned with a capacity that settles instead of alternating.
func TestInstanceUsesTrackedCapacity(t *testing.T) {
	s := NewState()
	base := time.Unix(1000, 0)
	var caps []float64
	for i := range 8 {
		end := base.Add(time.Duration(i) * 10 * time.Second)
		e := engineEst("b-0", "region-b", 200, end)
		e.GetEngine().ObservedRps = 55
		if i%2 == 1 {
			e.GetEngine().CapacityRps, e.GetEngine().ObservedRps = 60, 60
		}
		s.Apply(e)
		s.Apply(demandEst("region-b", 50, end))
		in, _, err := s.Instance(end, Settings{})
		if err != nil {
			t.Fatal(err)
		}
		caps = append(caps, in.Engines[0].CapacityRPS)
	}
	// Measurements pull it down; a busy window after them probes at most
	// probeStep × throughput above: it never goes back to the guess.
	for i := 5; i < len(caps); i++ {
		if caps[i] < 60 || caps[i] > probeStep*55 {
			t.Fatalf("planned capacities %v: want them in [60, %v] from the sixth window", caps, probeStep*55)
		}
	}
}
