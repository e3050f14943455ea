package plan

import (
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/schemas"
)

func weights(cluster string, ws map[string]float64) *schemas.ClusterWeights {
	cw := &schemas.ClusterWeights{Cluster: cluster}
	for id, w := range ws {
		cw.Weights = append(cw.Weights, &schemas.EngineWeight{EngineId: id, Weight: w})
	}
	return cw
}

func TestFillPeerClustersOnlySharedWeightedEngines(t *testing.T) {
	cws := []*schemas.ClusterWeights{
		weights("d", map[string]float64{"e1": 0.5, "e2": 0.5}),
		weights("a", map[string]float64{"e1": 0.2, "e9": 0.8}),
		weights("c", map[string]float64{"e3": 1}),
		weights("b", map[string]float64{"e1": 0.0, "e2": 1}), // no weight on e1
		weights("z", nil),
	}
	cws[0].PeerClusters = []string{"stale"}
	fillPeerClusters(cws)
	want := map[string][]string{"d": {"a", "b", "d"}, "a": {"a", "d"}, "c": {"c"}, "b": {"b", "d"}, "z": nil}
	for _, cw := range cws {
		if !slices.Equal(cw.GetPeerClusters(), want[cw.GetCluster()]) {
			t.Errorf("cluster %s: peer clusters %v, want %v", cw.GetCluster(), cw.GetPeerClusters(), want[cw.GetCluster()])
		}
	}
}

// TestSolveFillsPeerClusters: State.Solve's snapshot names, for each
// cluster, exactly the clusters (itself included) with weight on an
// engine it has weight on (checked pair by pair on the final weights).
func TestSolveFillsPeerClusters(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewState()
	s.Apply(engineEst("b-0", "region-b", 100, now))
	s.Apply(engineEst("c-0", "region-c", 80, now))
	s.Apply(engineEst("d-0", "region-d", 80, now))
	s.Apply(demandEst("region-b", 150, now)) // more than b-0 takes: spills
	s.Apply(demandEst("region-c", 10, now))
	s.Apply(demandEst("region-d", 10, now))
	in, eps, err := s.Instance(now, Settings{RegionRTTms: map[string]map[string]float64{
		"region-b": {"region-b": 2, "region-c": 10, "region-d": 200},
		"region-c": {"region-b": 10, "region-c": 2, "region-d": 200},
		"region-d": {"region-b": 200, "region-c": 200, "region-d": 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Solve(in, eps, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	on := func(cw *schemas.ClusterWeights, id string) bool {
		for _, w := range cw.GetWeights() {
			if w.GetEngineId() == id && w.GetWeight() > 0 {
				return true
			}
		}
		return false
	}
	shared := 0
	for _, a := range snap.GetClusters() {
		var want []string
		for _, b := range snap.GetClusters() {
			for _, w := range a.GetWeights() {
				if w.GetWeight() > 0 && on(b, w.GetEngineId()) {
					want = append(want, b.GetCluster())
					break
				}
			}
		}
		slices.Sort(want)
		if !slices.Equal(a.GetPeerClusters(), want) {
			t.Errorf("cluster %s: peer clusters %v, want %v", a.GetCluster(), a.GetPeerClusters(), want)
		}
		shared += len(want) - 1
	}
	if shared <= 0 {
		t.Fatalf("no cluster shares an engine: the test proves nothing: %v", snap.GetClusters())
	}
}
