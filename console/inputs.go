package console

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/switchyard-llm/switchyard/schemas"
)

// inputChange is one of the optimizer's inputs (or one binding
// constraint) that differs between two snapshots: the diff page's answer
// to "why did the weights move".
type inputChange struct {
	// Kind is "engine", "cluster" or "route" (a cluster→engine pair);
	// Engine and Cluster name the subject.
	Kind, Engine, Cluster string
	Input                 string
	From, To              string
	// Change is the relative change ("+40.0%") or "changed".
	Change string
	// size ranks the changes: the relative change, categorical changes
	// first.
	size float64
}

// Thresholds below which a numeric input counts as unchanged.
const (
	minRelChange   = 0.05 // capacity, demand, latency profiles
	minRTTChangeMs = 1.0  // and minRelChange
	maxInputRows   = 40
	categorical    = 1e9 // size of a health, binding or appearance change
)

// estimateSource returns an engine's estimate the optimizer planned
// snapshot version ms with (nil: unknown).
type estimateSource func(engine string, ms int64) *schemas.EngineEstimate

// inputChanges lists what differs between the inputs of snapshots a and
// b, largest first: per engine its health, ready replicas, capacity,
// batch limit and TTFT/TBOT profiles (from the estimates at each
// snapshot's window, when at knows them); per cluster its demand; per
// cluster→engine pair the network RTT and the binding constraints the
// snapshots report.
func inputChanges(a, b *schemas.WeightSnapshot, at estimateSource) []inputChange {
	var out []inputChange
	for _, id := range snapshotEngines(a, b) {
		ea, eb := at(id, int64(a.GetVersion())), at(id, int64(b.GetVersion()))
		out = append(out, engineChanges(id, ea, eb, plannedUtil(b, id))...)
	}
	for _, id := range unionClusters(a, b) {
		ca, cb := findCluster(a, id), findCluster(b, id)
		if c, ok := numChange(ca.GetDemandRps(), cb.GetDemandRps(), "%.2f rps", minRelChange, 0); ok {
			out = append(out, withSubject(c, "cluster", "", id, "demand"))
		}
		out = append(out, routeChanges(id, ca, cb)...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].size > out[j].size })
	if len(out) > maxInputRows {
		out = out[:maxInputRows]
	}
	return out
}

// engineChanges compares one engine's estimates; util is the load the
// latency profiles are compared at.
func engineChanges(id string, a, b *schemas.EngineEstimate, util float64) []inputChange {
	var out []inputChange
	add := func(c inputChange, input string) { out = append(out, withSubject(c, "engine", id, "", input)) }
	switch {
	case a == nil && b == nil:
		return nil
	case a == nil:
		add(catChange("no estimate", "estimated ("+healthName(b.GetHealth())+")"), "estimate")
		return out
	case b == nil:
		add(catChange("estimated", "no estimate"), "estimate")
		return out
	}
	if a.GetHealth() != b.GetHealth() {
		add(catChange(healthName(a.GetHealth()), healthName(b.GetHealth())), "health")
	}
	if a.GetReadyReplicas() != b.GetReadyReplicas() {
		add(catChange(fmt.Sprint(a.GetReadyReplicas()), fmt.Sprint(b.GetReadyReplicas())), "ready replicas")
	}
	if c, ok := numChange(a.GetCapacityRps(), b.GetCapacityRps(), "%.2f rps", minRelChange, 0); ok {
		add(c, "capacity")
	}
	if a.GetMaxBatch() != b.GetMaxBatch() || a.GetCapacitySource() != b.GetCapacitySource() {
		add(catChange(fmt.Sprintf("%d (%s)", a.GetMaxBatch(), a.GetCapacitySource()), fmt.Sprintf("%d (%s)", b.GetMaxBatch(), b.GetCapacitySource())), "batch limit")
	}
	for _, p := range []struct {
		name string
		a, b *schemas.LatencyProfile
	}{{"TTFT", a.GetTtftProfile(), b.GetTtftProfile()}, {"TBOT", a.GetTbotProfile(), b.GetTbotProfile()}} {
		la, oka := profileAt(p.a, util)
		lb, okb := profileAt(p.b, util)
		if !oka || !okb {
			continue
		}
		if c, ok := numChange(la, lb, "%.1f ms", minRelChange, 0); ok {
			add(c, fmt.Sprintf("%s at %.0f%% load", p.name, 100*util))
		}
	}
	return out
}

// routeChanges compares cluster id's weights' network RTTs and binding
// constraints.
func routeChanges(id string, a, b *schemas.ClusterWeights) []inputChange {
	type side struct {
		rtt     float64
		binding string
	}
	by := map[string][2]*side{}
	for k, cw := range []*schemas.ClusterWeights{a, b} {
		for _, ew := range cw.GetWeights() {
			v := by[ew.GetEngineId()]
			v[k] = &side{rtt: ew.GetExplanation().GetNetworkMs(), binding: strings.Join(ew.GetExplanation().GetBinding(), ",")}
			by[ew.GetEngineId()] = v
		}
	}
	ids := make([]string, 0, len(by))
	for e := range by {
		ids = append(ids, e)
	}
	sort.Strings(ids)
	var out []inputChange
	for _, e := range ids {
		v := by[e]
		if v[0] == nil || v[1] == nil {
			continue // an engine new to or gone from the cluster: its weight row says so
		}
		if c, ok := numChange(v[0].rtt, v[1].rtt, "%.1f ms", minRelChange, minRTTChangeMs); ok {
			out = append(out, withSubject(c, "route", e, id, "network RTT"))
		}
		if v[0].binding != v[1].binding {
			out = append(out, withSubject(catChange(orDash(v[0].binding), orDash(v[1].binding)), "route", e, id, "binding"))
		}
	}
	return out
}

func withSubject(c inputChange, kind, engine, cluster, input string) inputChange {
	c.Kind, c.Engine, c.Cluster, c.Input = kind, engine, cluster, input
	return c
}

func catChange(from, to string) inputChange {
	return inputChange{From: from, To: to, Change: "changed", size: categorical}
}

// numChange reports a change from a to b of at least minRel relative (of
// the larger magnitude) and minAbs absolute.
func numChange(a, b float64, format string, minRel, minAbs float64) (inputChange, bool) {
	d := math.Abs(b - a)
	scale := math.Max(math.Abs(a), math.Abs(b))
	if !(d > 0) || d < minAbs || d < minRel*scale {
		return inputChange{}, false
	}
	c := inputChange{From: fmt.Sprintf(format, a), To: fmt.Sprintf(format, b), size: d / scale}
	if a != 0 {
		c.Change = fmt.Sprintf("%+.1f%%", 100*(b-a)/math.Abs(a))
	} else {
		c.Change = "new"
	}
	return c, true
}

// profileAt is a latency profile's value at utilization u: linear between
// its points, flat before the first, the last segment extended after the
// last (as the optimizer reads it).
func profileAt(p *schemas.LatencyProfile, u float64) (float64, bool) {
	pts := p.GetPoints()
	switch {
	case len(pts) == 0:
		return 0, false
	case len(pts) == 1 || u <= pts[0].GetUtilization():
		return pts[0].GetLatencyMs(), true
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].GetUtilization() >= u })
	if i == len(pts) {
		i = len(pts) - 1
	}
	p0, p1 := pts[i-1], pts[i]
	du := p1.GetUtilization() - p0.GetUtilization()
	if !(du > 0) {
		return p1.GetLatencyMs(), true
	}
	return p0.GetLatencyMs() + (u-p0.GetUtilization())/du*(p1.GetLatencyMs()-p0.GetLatencyMs()), true
}

// plannedUtil is engine id's planned utilization in snap (the largest
// over its clusters; 0.5 when it has none), the load its profiles are
// compared at.
func plannedUtil(snap *schemas.WeightSnapshot, id string) float64 {
	u := 0.0
	for _, cw := range snap.GetClusters() {
		for _, ew := range cw.GetWeights() {
			if ew.GetEngineId() == id {
				u = math.Max(u, ew.GetPlannedUtilization())
			}
		}
	}
	if !(u > 0) {
		return 0.5
	}
	return math.Min(u, 1)
}

// snapshotEngines lists the engines either snapshot weighs, sorted.
func snapshotEngines(a, b *schemas.WeightSnapshot) []string {
	seen := map[string]bool{}
	var ids []string
	for _, s := range []*schemas.WeightSnapshot{a, b} {
		for _, cw := range s.GetClusters() {
			for _, ew := range cw.GetWeights() {
				if id := ew.GetEngineId(); !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
			}
		}
	}
	sort.Strings(ids)
	return ids
}

// unionClusters lists the clusters of either snapshot, sorted.
func unionClusters(a, b *schemas.WeightSnapshot) []string {
	seen := map[string]bool{}
	var ids []string
	for _, s := range []*schemas.WeightSnapshot{a, b} {
		for _, cw := range s.GetClusters() {
			if !seen[cw.GetCluster()] {
				seen[cw.GetCluster()] = true
				ids = append(ids, cw.GetCluster())
			}
		}
	}
	sort.Strings(ids)
	return ids
}

func healthName(h schemas.Health) string {
	return strings.ToLower(strings.TrimPrefix(h.String(), "HEALTH_"))
}
