package plan

import (
	"slices"

	"github.com/switchyard-llm/switchyard/schemas"
)

// fillPeerClusters sets each cluster's peer_clusters to the clusters
// with a positive weight on at least one engine it has a positive weight
// on, itself included (its own gateways share engines with each other),
// sorted: its gateways take peer load from their gateways only
// (gateway/peers). A cluster with no positive weight gets none. It runs
// on the final weights.
func fillPeerClusters(clusters []*schemas.ClusterWeights) {
	// The clusters weighting each engine, by index into clusters, each
	// once and in order.
	on := map[string][]int{}
	for i, cw := range clusters {
		for _, w := range cw.GetWeights() {
			if !(w.GetWeight() > 0) {
				continue
			}
			l := on[w.GetEngineId()]
			if n := len(l); n > 0 && l[n-1] == i {
				continue // an engine listed twice
			}
			on[w.GetEngineId()] = append(l, i)
		}
	}
	peers := make([]map[int]bool, len(clusters))
	for _, l := range on {
		for _, i := range l {
			for _, j := range l {
				if peers[i] == nil {
					peers[i] = map[int]bool{}
				}
				peers[i][j] = true
			}
		}
	}
	for i, cw := range clusters {
		names := make([]string, 0, len(peers[i]))
		for j := range peers[i] {
			names = append(names, clusters[j].GetCluster())
		}
		slices.Sort(names)
		cw.PeerClusters = slices.Compact(names)
		if len(cw.PeerClusters) == 0 {
			cw.PeerClusters = nil
		}
	}
}
