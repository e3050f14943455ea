package plan

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestReplicaCapacityPinned: an engine named in ReplicaCapacityRPS is
// planned on the pinned per-replica capacity times its ready replicas,
// whatever its estimate says; the others keep the capacity the planner
// tracks.
func TestReplicaCapacityPinned(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewState()
	pinned := engineEst("b-0", "region-b", 100, now)
	pinned.GetEngine().ReadyReplicas = 3
	s.Apply(pinned)
	s.Apply(engineEst("c-0", "region-c", 80, now))
	s.Apply(demandEst("region-b", 10, now))
	in, _, err := s.Instance(now, Settings{ReplicaCapacityRPS: map[string]float64{"b-0": 7, "absent": 1}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, e := range in.Engines {
		got[e.ID] = e.CapacityRPS
	}
	// c-0 is planned as without pins: 0.85 of its unmeasured bound.
	if got["b-0"] != 21 || got["c-0"] != unmeasuredHeadroom*80 || len(got) != 2 {
		t.Fatalf("capacities %v, want b-0 pinned at 3 x 7 = 21 and c-0 at %v", got, unmeasuredHeadroom*80)
	}
	// Down to zero ready replicas: the pin still counts one replica (the
	// engine is planned as unhealthy, not with zero capacity).
	down := engineEst("b-0", "region-b", 100, now.Add(time.Second))
	down.GetEngine().ReadyReplicas, down.GetEngine().Health = 0, schemas.Health_HEALTH_UNHEALTHY
	s.Apply(down)
	in, _, err = s.Instance(now.Add(time.Second), Settings{ReplicaCapacityRPS: map[string]float64{"b-0": 7}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range in.Engines {
		if e.ID == "b-0" && (e.CapacityRPS != 7 || e.Healthy) {
			t.Fatalf("down engine: %+v, want capacity 7 and unhealthy", e)
		}
	}
}
