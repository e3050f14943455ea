package optimizer

import (
	"slices"
	"strings"
)

// problem is an Instance in index form: clusters and engines sorted by id,
// and the allowed cluster→engine edges (resident and usable) in CSR
// layout: cluster i owns edges start[i]..start[i+1]-1.
type problem struct {
	clusterID []string
	engineID  []string
	demand    []float64
	capRPS    []float64
	healthy   []bool
	usable    []bool // healthy with positive capacity
	curves    []curve
	maxU, cw  float64

	start []int32
	eng   []int32
	rtt   []float64
	prev  []float64 // previous flow in rps (demand * previous weight)

	// Edges that are not allowed but worth explaining (unhealthy or
	// zero-capacity resident engines, previously used non-resident ones).
	blocked [][]blockedEdge
}

type blockedEdge struct {
	engine int32
	rtt    float64 // NaN when not resident
	reason string
}

func newProblem(in *Instance) *problem {
	p := &problem{maxU: in.MaxUtilization, cw: in.ChurnWeight}
	clusters := slices.Clone(in.Clusters)
	slices.SortFunc(clusters, func(a, b Cluster) int { return strings.Compare(a.ID, b.ID) })
	engines := slices.Clone(in.Engines)
	slices.SortFunc(engines, func(a, b Engine) int { return strings.Compare(a.ID, b.ID) })
	eidx := make(map[string]int32, len(engines))
	for j, e := range engines {
		eidx[e.ID] = int32(j)
		p.engineID = append(p.engineID, e.ID)
		p.capRPS = append(p.capRPS, e.CapacityRPS)
		p.healthy = append(p.healthy, e.Healthy)
		p.usable = append(p.usable, e.Healthy && e.CapacityRPS > 0)
		p.curves = append(p.curves, newCurve(e.LatencyMs, e.CapacityRPS, in.MaxUtilization))
	}
	p.start = make([]int32, 1, len(clusters)+1)
	p.blocked = make([][]blockedEdge, len(clusters))
	var idx []int32
	for i, c := range clusters {
		p.clusterID = append(p.clusterID, c.ID)
		p.demand = append(p.demand, c.DemandRPS)
		rtts := in.RTTms[c.ID]
		prev := in.Previous[c.ID]
		idx = idx[:0]
		for id := range rtts {
			idx = append(idx, eidx[id])
		}
		slices.Sort(idx) // engine order is id order
		for _, j := range idx {
			id := p.engineID[j]
			if !p.usable[j] {
				reason := "unhealthy"
				if p.healthy[j] {
					reason = "capacity"
				}
				p.blocked[i] = append(p.blocked[i], blockedEdge{engine: j, rtt: rtts[id], reason: reason})
				continue
			}
			p.eng = append(p.eng, j)
			p.rtt = append(p.rtt, rtts[id])
			pw := prev[id]
			if pw < 1e-9 { // rounding dust from an earlier plan, not traffic
				pw = 0
			}
			p.prev = append(p.prev, c.DemandRPS*pw)
		}
		p.start = append(p.start, int32(len(p.eng)))
		for _, id := range sortedKeys(prev) {
			if _, ok := rtts[id]; !ok && prev[id] > 0 {
				p.blocked[i] = append(p.blocked[i], blockedEdge{engine: eidx[id], rtt: nan(), reason: "residency"})
			}
		}
		slices.SortFunc(p.blocked[i], func(a, b blockedEdge) int { return int(a.engine) - int(b.engine) })
	}
	return p
}
