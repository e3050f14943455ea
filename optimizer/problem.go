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

// newProblem indexes in, which must pass validateFields. It reports
// false when ids or maps are invalid (Validate says which).
func newProblem(in *Instance) (*problem, bool) {
	p := &problem{maxU: in.MaxUtilization, cw: in.ChurnWeight}
	clusters := slices.Clone(in.Clusters)
	slices.SortFunc(clusters, func(a, b Cluster) int { return strings.Compare(a.ID, b.ID) })
	engines := slices.Clone(in.Engines)
	slices.SortFunc(engines, func(a, b Engine) int { return strings.Compare(a.ID, b.ID) })
	eidx, ok := p.addEngines(engines, in.MaxUtilization)
	if !ok {
		return nil, false
	}
	nc, ne := len(clusters), len(engines)
	nEdge := 0
	for _, row := range in.RTTms {
		nEdge += len(row)
	}
	p.start = make([]int32, 1, nc+1)
	p.eng = make([]int32, 0, nEdge)
	p.rtt = make([]float64, 0, nEdge)
	p.prev = make([]float64, 0, nEdge)
	p.clusterID = make([]string, nc)
	p.demand = make([]float64, nc)
	p.blocked = make([][]blockedEdge, nc)
	b := &rowBuilder{eidx: eidx, seen: make([]int32, ne), prevW: make([]float64, ne), rttAt: make([]float64, ne)}
	rows, prevs := 0, 0
	for i, c := range clusters {
		if i > 0 && c.ID == clusters[i-1].ID {
			return nil, false
		}
		p.clusterID[i] = c.ID
		p.demand[i] = c.DemandRPS
		rtts, ok := in.RTTms[c.ID]
		if ok {
			rows++
		}
		prev, ok := in.Previous[c.ID]
		if ok {
			prevs++
		}
		if !b.rttRow(i, rtts) || !b.prevRow(prev) {
			return nil, false
		}
		p.addEdges(i, c.DemandRPS, b)
	}
	if rows != len(in.RTTms) || prevs != len(in.Previous) {
		return nil, false // rows of unknown clusters
	}
	return p, true
}

// addEngines indexes the engines (sorted by id) and returns the id ->
// index map; it reports false on a duplicate id.
func (p *problem) addEngines(engines []Engine, maxU float64) (map[string]int32, bool) {
	ne := len(engines)
	eidx := make(map[string]int32, ne)
	p.engineID = make([]string, ne)
	p.capRPS = make([]float64, ne)
	p.healthy = make([]bool, ne)
	p.usable = make([]bool, ne)
	p.curves = make([]curve, ne)
	for j, e := range engines {
		if j > 0 && e.ID == engines[j-1].ID {
			return nil, false
		}
		eidx[e.ID] = int32(j)
		p.engineID[j] = e.ID
		p.capRPS[j] = e.CapacityRPS
		p.healthy[j] = e.Healthy
		p.usable[j] = e.Healthy && e.CapacityRPS > 0
		p.curves[j] = newCurve(e.LatencyMs, e.CapacityRPS, maxU)
	}
	return eidx, true
}

// rowBuilder holds one cluster's rtt and previous-weight rows in engine
// order, with per-engine scratch reused across clusters.
type rowBuilder struct {
	eidx      map[string]int32
	row, prow []rowEntry
	// Per engine: the cluster (+1) whose rtt row lists it, its rtt there
	// and its previous weight for that cluster.
	seen         []int32
	rttAt, prevW []float64
}

type rowEntry struct {
	j int32
	v float64
}

// rttRow reads cluster i's rtt row into b.row in engine order; it reports
// false on an unknown engine or an rtt out of range.
func (b *rowBuilder) rttRow(i int, rtts map[string]float64) bool {
	b.row = b.row[:0]
	for id, r := range rtts {
		j, ok := b.eidx[id]
		if !ok || !inRange(r) {
			return false
		}
		b.row = append(b.row, rowEntry{j, r})
		b.seen[j] = int32(i + 1)
		b.rttAt[j] = r
	}
	// Engine order is id order: a dense row is read off by a scan
	// over the engines, a sparse one sorted.
	if 4*len(b.row) >= len(b.seen) {
		b.row = b.row[:0]
		for j := range b.seen {
			if b.seen[j] == int32(i+1) {
				b.row = append(b.row, rowEntry{int32(j), b.rttAt[j]})
			}
		}
	} else {
		slices.SortFunc(b.row, func(x, y rowEntry) int { return int(x.j) - int(y.j) })
	}
	return true
}

// prevRow reads a cluster's previous weights into b.prow (engine order)
// and b.prevW; it reports false on an unknown engine, a weight outside
// [0, 1] or weights summing to more than 1.
func (b *rowBuilder) prevRow(prev map[string]float64) bool {
	b.prow = b.prow[:0]
	for id, w := range prev {
		j, ok := b.eidx[id]
		if !ok || !finite(w) || w < 0 || w > 1 {
			return false
		}
		b.prow = append(b.prow, rowEntry{j, w})
	}
	slices.SortFunc(b.prow, func(x, y rowEntry) int { return int(x.j) - int(y.j) })
	sum := 0.0 // in id order, as Validate sums
	for _, e := range b.prow {
		sum += e.v
		b.prevW[e.j] = e.v
	}
	return sum <= 1+1e-6
}

// addEdges appends cluster i's allowed edges (usable engines in its rtt
// row) and its blocked ones: unusable engines in the row and previously
// used engines outside it. It clears b.prevW.
func (p *problem) addEdges(i int, demand float64, b *rowBuilder) {
	for _, e := range b.row {
		j := e.j
		if !p.usable[j] {
			reason := "unhealthy"
			if p.healthy[j] {
				reason = "capacity"
			}
			p.blocked[i] = append(p.blocked[i], blockedEdge{engine: j, rtt: e.v, reason: reason})
			continue
		}
		p.eng = append(p.eng, j)
		p.rtt = append(p.rtt, e.v)
		pw := b.prevW[j]
		if pw < 1e-9 { // rounding dust from an earlier plan, not traffic
			pw = 0
		}
		p.prev = append(p.prev, demand*pw)
	}
	p.start = append(p.start, int32(len(p.eng)))
	for _, e := range b.prow {
		if b.seen[e.j] != int32(i+1) && e.v > 0 {
			p.blocked[i] = append(p.blocked[i], blockedEdge{engine: e.j, rtt: nan(), reason: "residency"})
		}
		b.prevW[e.j] = 0
	}
	slices.SortFunc(p.blocked[i], func(x, y blockedEdge) int { return int(x.engine) - int(y.engine) })
}
