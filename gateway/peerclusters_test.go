package gateway

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestPeerClustersFollowSnapshot: the gateway gives gateway/peers no
// peer clusters on its static engines (so the sharer hears every
// cluster) and the routed snapshot's peer_clusters once one is applied.
func TestPeerClustersFollowSnapshot(t *testing.T) {
	a := newFakeEngine(t, "a")
	reg := prometheus.NewRegistry()
	g, err := New("us-east", Engines(static(a)...), HealthInterval(-1), Registerer(reg), Gatherer(reg))
	if err != nil {
		t.Fatal(err)
	}
	if got := g.PeerClusters(); got != nil {
		t.Fatalf("static engines: peer clusters %q, want none", got)
	}
	snap := snapshot(1, "us-east", 0, map[*fakeEngine]float64{a: 1})
	if err := g.apply(snap); err != nil {
		t.Fatal(err)
	}
	if got := g.PeerClusters(); got != nil {
		t.Fatalf("snapshot without peer_clusters: %q, want none", got)
	}
	snap = snapshot(2, "us-east", 0, map[*fakeEngine]float64{a: 1})
	snap.Clusters[0].PeerClusters = []string{"eu-west", "us-east"}
	if err := g.apply(snap); err != nil {
		t.Fatal(err)
	}
	if got, want := g.PeerClusters(), []string{"eu-west", "us-east"}; !slices.Equal(got, want) {
		t.Fatalf("peer clusters %q, want %q", got, want)
	}
}
