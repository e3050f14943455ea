package gateway

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// TestSnapshotSetsCacheResidency: each routed engine's picker state takes
// the cache residency of its explanation, also for engines after one of
// weight 0 (left out of the table); a later snapshot without one (0:
// unknown) clears it.
func TestSnapshotSetsCacheResidency(t *testing.T) {
	g, err := New("us-east", HealthInterval(-1))
	if err != nil {
		t.Fatal(err)
	}
	snap := func(v uint64, res ...float64) []byte {
		cw := &schemas.ClusterWeights{Cluster: "us-east"}
		for i, id := range []string{"a", "z", "b", "c"} {
			w := 1.0 / 3
			if id == "z" {
				w = 0
			}
			cw.Weights = append(cw.Weights, &schemas.EngineWeight{EngineId: id, EndpointUrl: "http://127.0.0.1:1", Weight: w,
				Explanation: &schemas.Explanation{CacheResidencyS: res[i]}})
		}
		b, err := proto.Marshal(&schemas.WeightSnapshot{SchemaVersion: 1, Version: v, Clusters: []*schemas.ClusterWeights{cw}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	residency := func(id string) int64 {
		st, ok := g.pool.Lookup(id)
		if !ok {
			t.Fatalf("no state for engine %q", id)
		}
		return st.CacheResidency()
	}
	if err := g.ApplySnapshot(snap(1, 42.5, 7, 300, 0)); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int64{"a": 43, "b": 300, "c": 0} {
		if got := residency(id); got != want {
			t.Errorf("engine %s: residency %d s, want %d", id, got, want)
		}
	}
	if err := g.ApplySnapshot(snap(2, 0, 0, 12, 0)); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int64{"a": 0, "b": 12, "c": 0} {
		if got := residency(id); got != want {
			t.Errorf("after the second snapshot, engine %s: residency %d s, want %d", id, got, want)
		}
	}
}
