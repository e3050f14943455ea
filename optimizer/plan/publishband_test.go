package plan

import (
	"testing"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestHeldRTTBand: a measured round trip within max(10%, 1 ms) of the one
// planned on leaves it; a larger move replaces it, and later moves are
// measured from the new one.
func TestHeldRTTBand(t *testing.T) {
	s := NewState()
	k := [2]string{"c", "e"}
	// 43.9 and 36.1 are within 4 ms of 40; 44.5 is not and moves it; 41
	// is within 4.45 of 44.5; at 2 ms the 1 ms floor holds 2.9 and lets
	// 3.1 move it.
	got := []float64{
		s.heldRTT(k, 40), s.heldRTT(k, 43.9), s.heldRTT(k, 36.1), s.heldRTT(k, 44.5), s.heldRTT(k, 41),
		s.heldRTT(k, 2), s.heldRTT(k, 2.9), s.heldRTT(k, 3.1),
	}
	want := []float64{40, 40, 40, 44.5, 44.5, 2, 2, 3.1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: planned on %v, want %v (all: %v)", i, got[i], want[i], got)
		}
	}
}

// TestPublishedResidencyBand: the published residency follows the
// tracked one only once it departs by more than 10% from the value last
// published, so a slowly drifting estimate republishes in steps.
func TestPublishedResidencyBand(t *testing.T) {
	var s capacityState
	e := func(end int64, r float64) *schemas.EngineEstimate {
		return &schemas.EngineEstimate{EngineId: "e", WindowEndUnixMs: end, Health: schemas.Health_HEALTH_HEALTHY,
			ReadyReplicas: 1, CapacityRps: 10, ObservedRps: 1, CacheResidencyS: r}
	}
	s.observe(e(1000, 100))
	if got := s.residency(); got != 100 {
		t.Fatalf("first: %v, want 100", got)
	}
	changes, last := 0, s.residency()
	for i := range 60 { // every window says 200 s: the tracked value climbs at 5% a window
		s.observe(e(int64(2000+1000*i), 200))
		r := s.residency()
		if r != last {
			if r < last*1.1 && r > last/1.1 {
				t.Fatalf("window %d: published moved by less than the band: %v -> %v", i, last, r)
			}
			changes, last = changes+1, r
		}
	}
	tracked := 1 / s.turnover
	if d := tracked - last; d < 0 || d > 0.1*last {
		t.Fatalf("published %v is not within 10%% below the tracked %v", last, tracked)
	}
	if changes == 0 || changes > 10 {
		t.Fatalf("published %d times over 60 windows of drift, want a few steps", changes)
	}
}
