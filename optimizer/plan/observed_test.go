package plan

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
)

// TestSnapshotCarriesDemandEstimate: each cluster's weights carry the
// demand estimate its plan was made from (offered rate and rejections,
// for explain and the console), a copy; a cluster planned at the minimum
// demand (no fresh estimate) carries none, nor does a stale estimate.
func TestSnapshotCarriesDemandEstimate(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewState()
	s.Apply(engineEst("b-0", "region-b", 100, now))
	s.Apply(engineEst("c-0", "region-c", 80, now))
	b := demandEst("region-b", 10.5, now)
	b.GetDemand().RequestCount, b.GetDemand().RejectedCount, b.GetDemand().ShedAdmissionCount = 315, 126, 94
	s.Apply(b)
	s.Apply(demandEst("region-d", 3, now.Add(-time.Hour))) // stale
	set := Settings{Clusters: []string{"region-c", "region-d"}}
	in, eps, err := s.Instance(now, set)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Solve(in, eps, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, cw := range snap.GetClusters() {
		seen++
		d := cw.GetDemandEstimate()
		switch cw.GetCluster() {
		case "region-b":
			if !proto.Equal(d, b.GetDemand()) {
				t.Fatalf("region-b carries %v, want %v", d, b.GetDemand())
			}
			if d == b.GetDemand() {
				t.Fatal("region-b carries the state's own message, not a copy")
			}
		default:
			if d != nil {
				t.Fatalf("%s planned at the minimum demand carries %v", cw.GetCluster(), d)
			}
		}
	}
	if seen != 3 {
		t.Fatalf("%d clusters, want 3", seen)
	}
}
