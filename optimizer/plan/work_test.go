package plan

import (
	"math"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// workEst is one window's estimate of engine id: a measured capacity
// (capacity = throughput = rps) at a token mix of work seconds a request.
func workEst(id string, end time.Time, rps, work float64) *schemas.Estimate {
	e := engineEst(id, "region-a", rps, end)
	e.GetEngine().ObservedRps = rps
	e.GetEngine().WorkPerRequestS = work
	return e
}

// TestCapacityInWorkUnits: two identical engines measured while serving
// different token mixes (one drew long prompts: 0.5 rps at 2 s of work
// each; the other short ones: 2 rps at 0.5 s) do the same work per
// second, so they are planned with one capacity, at the class's reference
// mix, where in requests one looked four times the other.
func TestCapacityInWorkUnits(t *testing.T) {
	s := NewState()
	end := time.Unix(1000, 0)
	s.Apply(workEst("a-0", end, 0.5, 2))
	s.Apply(workEst("a-1", end, 2, 0.5))
	s.Apply(demandEst("region-a", 1, end))
	in, _, err := s.Instance(end, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	// Reference: throughput-weighted work per request, (0.5·2 + 2·0.5) / 2.5.
	ref := (0.5*2 + 2*0.5) / 2.5
	for _, e := range in.Engines {
		if want := 1 / ref; math.Abs(e.CapacityRPS-want) > 1e-9 {
			t.Errorf("%s planned at %v rps, want %v (1 replica-second/s at %v s a request)", e.ID, e.CapacityRPS, want, ref)
		}
	}
}

// TestCapacityWithoutWorkStaysInRequests: estimates without the work
// figure (older processors, engines without token counters) are tracked
// in requests exactly as before.
func TestCapacityWithoutWorkStaysInRequests(t *testing.T) {
	s := NewState()
	end := time.Unix(1000, 0)
	s.Apply(workEst("a-0", end, 0.5, 0))
	s.Apply(workEst("a-1", end, 2, 0))
	s.Apply(demandEst("region-a", 1, end))
	in, _, err := s.Instance(end, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"a-0": 0.5, "a-1": 2}
	for _, e := range in.Engines {
		if math.Abs(e.CapacityRPS-want[e.ID]) > 1e-9 {
			t.Errorf("%s planned at %v rps, want %v", e.ID, e.CapacityRPS, want[e.ID])
		}
	}
}

// TestWorkStateTransitions: a window without the work figure teaches a
// work-tracking engine nothing, and keeps it alive only when the engine
// was idle; the first window with one starts a requests-tracking engine
// over in work.
func TestWorkStateTransitions(t *testing.T) {
	est := func(end int64, c, x, w float64) *schemas.EngineEstimate {
		e := capEst(end, c, x, 1)
		e.WorkPerRequestS = w
		return e
	}
	var s capacityState
	s.observe(est(1, 60, 60, 0)) // requests: measured 60 rps
	s.observe(est(2, 2, 2, 0.5)) // work: starts over at 1 replica-second/s
	if !s.work || s.replicaRPS != 1 || !s.measured {
		t.Fatalf("after the first window with work: %+v, want work tracking at 1, measured", s)
	}
	s.observe(est(3, 50, 0, 0)) // idle window, no work figure
	if s.replicaRPS != 1 || s.lastEnd != 3 {
		t.Fatalf("after an idle window: %+v, want 1 replica-second/s kept, last end 3", s)
	}
	lo, hi := s.capacity(est(4, 9, 0, 0), 0.25)
	if lo != 4 || hi != 4 {
		t.Fatalf("capacity at 0.25 s a request: %v, %v; want 4, 4", lo, hi)
	}
	if lo, _ := s.capacity(est(4, 9, 0, 0), 0); lo != 9 {
		t.Fatalf("capacity without a reference: %v, want the estimate's 9", lo)
	}
	// Busy windows without the figure (its token counters went away):
	// nothing learned, not kept alive; past capacityMemoryMs the engine
	// starts over in requests.
	s.observe(est(5, 50, 40, 0))
	if !s.work || s.lastEnd != 3 {
		t.Fatalf("after a busy window without work: %+v, want work tracking, last end 3", s)
	}
	s.observe(est(3+capacityMemoryMs+1, 50, 40, 0))
	if s.work || s.replicaRPS != 50 {
		t.Fatalf("after %d ms of busy windows without work: %+v, want tracking in requests at 50", capacityMemoryMs, s)
	}
}

// TestReferenceWorkTracking: a class's reference work per request moves
// refGain toward each window's, once per window, and what is planned on
// changes only once the tracked value departs from it by more than
// refBand.
func TestReferenceWorkTracking(t *testing.T) {
	s := NewState()
	one := func(end int64, w float64) []*schemas.EngineEstimate {
		return []*schemas.EngineEstimate{{EngineId: "a", GpuClass: "h100", WindowEndUnixMs: end, ObservedRps: 1, WorkPerRequestS: w}}
	}
	s.observeRef(one(1, 1))
	s.observeRef(one(1, 5)) // same window again: counted once
	if got := s.reference()["h100"]; got != 1 {
		t.Fatalf("reference %v, want 1", got)
	}
	s.observeRef(one(2, 1.25)) // tracked 1.05: within the band
	if got := s.reference()["h100"]; got != 1 {
		t.Fatalf("reference %v after a small move, want 1 held", got)
	}
	s.observeRef(one(3, 2)) // tracked 1.05 + 0.2·0.95 = 1.24: past the band
	if got, want := s.reference()["h100"], 1.05+refGain*(2-1.05); math.Abs(got-want) > 1e-12 {
		t.Fatalf("reference %v, want %v", got, want)
	}
	if _, ok := s.reference()["a100"]; ok {
		t.Fatal("a class without engines has a reference")
	}
	// Another class's windows past capacityMemoryMs: h100 is forgotten.
	s.observeRef([]*schemas.EngineEstimate{{EngineId: "b", GpuClass: "a100", WindowEndUnixMs: 4 + capacityMemoryMs, ObservedRps: 1, WorkPerRequestS: 1}})
	if _, ok := s.reference()["h100"]; ok {
		t.Fatal("a class without a work figure for capacityMemoryMs still has a reference")
	}
}

// TestHostileWork: work figures that are not finite, negative, or large
// enough to overflow a product, next to capacity, demand and network
// estimates above what an instance takes, leave every planned capacity
// finite and non-negative and the plan solvable.
func TestHostileWork(t *testing.T) {
	for _, w := range []float64{math.NaN(), math.Inf(1), -1, 1e308, 5e-324} {
		s := NewState()
		end := time.Unix(1000, 0)
		for i := range 3 {
			end = end.Add(10 * time.Second)
			s.Apply(workEst("a-0", end, 2, w))
			s.Apply(workEst("a-1", end, 1e300, 1e10))
			s.Apply(workEst("a-2", end, 1, 0.5))
			s.Apply(demandEst("region-a", float64(i+1), end))
			s.Apply(demandEst("region-b", 1e300, end))
			s.Apply(&schemas.Estimate{Kind: &schemas.Estimate_Network{Network: &schemas.NetworkEstimate{
				Cluster: "region-a", EngineId: "a-2", WindowEndUnixMs: end.UnixMilli(), RttMs: 1e300, Samples: 100}}})
			in, _, err := s.Instance(end, Settings{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range in.Engines {
				if !finite(e.CapacityRPS) || e.CapacityRPS < 0 {
					t.Fatalf("work %v: %s planned at %v rps", w, e.ID, e.CapacityRPS)
				}
			}
			if _, err := Solve(in, nil, uint64(end.UnixMilli()), end); err != nil {
				t.Fatalf("work %v: %v", w, err)
			}
		}
	}
}
