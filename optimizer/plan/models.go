package plan

import (
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	opt "github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/schemas"
)

// A cluster's requests for a model that only some engines serve are
// planned as a cluster of their own: an instance cluster whose id is the
// cluster's and the model's joined by modelSep, with the model's share of
// the cluster's demand and, as its reachable engines, those that serve
// the model (an engine whose signals list no models serves any). One
// solve so shares the engines' capacity between the models. The rest of
// the cluster's demand (requests naming no model, or a model every engine
// serves) stays with the cluster itself. State.Solve folds the model
// clusters back into their cluster's ClusterWeights.model_weights.
const modelSep = "\x1f" // a control character: no cluster name holds it

// partFloorRPS is the least demand a cluster split by model, and each of
// its models' parts, is planned at (instead of --min-demand-rps, which
// would add that much phantom load to every part): enough for the solve
// to give each part weights, too little to take capacity.
const partFloorRPS = 1e-3

func modelClusterID(cluster, model string) string { return cluster + modelSep + model }

// splitModelCluster returns the cluster and model of an instance cluster
// id, ok false for a cluster's own id.
func splitModelCluster(id string) (cluster, model string, ok bool) {
	return strings.Cut(id, modelSep)
}

// servedModels maps each engine with a model list to its models
// (sorted, from its estimate); engines without a list are absent.
func servedModels(engines []*schemas.EngineEstimate) map[string][]string {
	out := map[string][]string{}
	for _, e := range engines {
		if l := e.GetModels(); len(l) > 0 {
			l = slices.Clone(l)
			slices.Sort(l)
			out[e.GetEngineId()] = l
		}
	}
	return out
}

// serves reports whether engine id serves model, by served.
func serves(served map[string][]string, id, model string) bool {
	l, ok := served[id]
	if !ok {
		return true
	}
	_, found := slices.BinarySearch(l, model)
	return found
}

// modelShare is one model's demand within a part of a cluster's demand.
type modelShare struct {
	model string
	rps   float64
}

// modelParts splits rps, a cluster's planned demand, by d's requests per
// model. The models some but not all of engines serve are grouped by the
// engines that serve them (a base model and the LoRA adapters listed on
// the same engines are one part: planning each apart would give them the
// same weights and spread every adapter over every engine); each group is
// a part named by its first model, with its members' shares of rps. The
// rest of rps (requests naming no model, a model every engine serves, or
// one no engine lists, which gateways send to any engine) is returned as
// rest.
func modelParts(d *schemas.DemandEstimate, rps float64, engines []*schemas.EngineEstimate, served map[string][]string) (parts map[string][]modelShare, rest float64) {
	total := float64(d.GetRequestCount())
	if len(served) == 0 || len(d.GetModels()) == 0 || !(total > 0) {
		return nil, rps
	}
	rest = rps
	leader := map[string]string{} // the serving engines, joined -> the group's first model
	for _, md := range d.GetModels() {
		m := md.GetModel()
		if m == "" {
			continue
		}
		var set []string
		for _, e := range engines {
			if serves(served, e.GetEngineId(), m) {
				set = append(set, e.GetEngineId())
			}
		}
		if len(set) == len(engines) || len(set) == 0 {
			continue // every engine may take it (no engine lists it: gateways let the engines judge)
		}
		share := rps * float64(md.GetRequestCount()) / total
		rest -= share
		key := strings.Join(set, "\x00")
		l, ok := leader[key]
		if !ok {
			l = m
			leader[key] = m
		}
		if parts == nil {
			parts = map[string][]modelShare{}
		}
		parts[l] = append(parts[l], modelShare{m, share})
	}
	return parts, max(rest, 0)
}

// partDemand is the demand of a part's models.
func partDemand(ms []modelShare) float64 {
	var sum float64
	for _, m := range ms {
		sum += m.rps
	}
	return sum
}

// foldModelClusters moves the entries of model clusters into their
// cluster's model_weights, one per model of the part (members, by
// instance cluster id; a part without members is its first model's
// alone), sorted by model, and names the cluster in place of a model
// cluster among every entry's peer clusters.
func foldModelClusters(snap *schemas.WeightSnapshot, members map[string][]modelShare) {
	byName := map[string]*schemas.ClusterWeights{}
	var kept []*schemas.ClusterWeights
	var parts []*schemas.ClusterWeights
	for _, cw := range snap.GetClusters() {
		if _, _, ok := splitModelCluster(cw.GetCluster()); ok {
			parts = append(parts, cw)
			continue
		}
		byName[cw.GetCluster()] = cw
		kept = append(kept, cw)
	}
	if len(parts) == 0 {
		return
	}
	for _, p := range parts {
		c, m, _ := splitModelCluster(p.GetCluster())
		cw := byName[c]
		if cw == nil { // the cluster's own demand is planned always
			cw = &schemas.ClusterWeights{Cluster: c}
			byName[c] = cw
			kept = append(kept, cw)
		}
		ms := members[p.GetCluster()]
		if len(ms) == 0 {
			ms = []modelShare{{m, p.GetDemandRps()}}
		}
		for i, x := range ms {
			ws := p.GetWeights()
			if i > 0 {
				ws = make([]*schemas.EngineWeight, len(p.GetWeights()))
				for j, w := range p.GetWeights() {
					ws[j] = proto.CloneOf(w)
				}
			}
			cw.ModelWeights = append(cw.ModelWeights, &schemas.ModelWeights{Model: x.model, Weights: ws,
				ShedFraction: p.GetShedFraction(), DemandRps: x.rps})
		}
		cw.PeerClusters = append(cw.PeerClusters, p.GetPeerClusters()...)
	}
	for _, cw := range kept {
		slices.SortFunc(cw.ModelWeights, func(a, b *schemas.ModelWeights) int { return strings.Compare(a.GetModel(), b.GetModel()) })
		peers := cw.PeerClusters[:0]
		for _, p := range cw.GetPeerClusters() {
			if c, _, ok := splitModelCluster(p); ok {
				p = c
			}
			peers = append(peers, p)
		}
		slices.Sort(peers)
		cw.PeerClusters = slices.Compact(peers)
	}
	snap.Clusters = kept
}

// releaseForModels does for each model's part of the demand what
// Instance does for the whole: where the part does not fit the planned
// capacity of the engines that serve it, their unmeasured reserves are
// released as far as needed (release[i], the share of engine i's reserve
// released, is raised to it), and the utilization cap returned is what
// the part needs of their whole capacity (spendHeadroom), at least maxU.
// his are the engines' capacities with every reserve released.
func releaseForModels(in *opt.Instance, his []float64, served map[string][]string, maxU float64, release []float64) float64 {
	demand := map[string]float64{}
	for _, c := range in.Clusters {
		if _, m, ok := splitModelCluster(c.ID); ok {
			demand[m] += c.DemandRPS
		}
	}
	u := maxU
	for _, m := range sortedKeys(demand) {
		var lo, hi float64
		for i, e := range in.Engines {
			if e.Healthy && serves(served, e.ID, m) {
				lo += e.CapacityRPS
				hi += his[i]
			}
		}
		if need := demand[m] / maxU; need > lo && hi > lo {
			t := math.Min(1, (need-lo)/(hi-lo))
			for i, e := range in.Engines {
				if serves(served, e.ID, m) {
					release[i] = max(release[i], t)
				}
			}
		}
		u = max(u, spendHeadroom(maxU, demand[m], hi))
	}
	return u
}
