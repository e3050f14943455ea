package optimizer

import (
	"math"

	"github.com/switchyard-llm/switchyard/schemas"
)

// SolverName identifies this solver in schemas.SolveStats.
const SolverName = "switchyard-dual-newton"

// Solution is the optimal plan for an Instance. Its JSON form is what
// `switchyard solve --json` prints.
type Solution struct {
	// ObjectiveMs is the mean end-to-end latency over routed requests
	// (network plus engine latency, without the churn term).
	ObjectiveMs float64 `json:"objective_ms"`
	// Weights[cluster][engine] is the fraction of the cluster's demand
	// sent to the engine; only positive weights are listed.
	Weights map[string]map[string]float64 `json:"weights"`
	// Shed[cluster] is the fraction of the cluster's demand shed; for every
	// cluster sum(Weights[cluster]) + Shed[cluster] == 1.
	Shed    map[string]float64     `json:"shed"`
	Engines map[string]EngineState `json:"engines"`
	// SolveMs is left zero by Solve (the package reads no clock); callers
	// that time the call fill it in.
	SolveMs float64 `json:"solve_ms"`
	// DualityGap is the certified relative gap (primal - dual)/primal of
	// the full objective including churn (1 when there is no useful bound).
	DualityGap   float64 `json:"duality_gap"`
	Iterations   int     `json:"iterations"`
	TotalShedRPS float64 `json:"total_shed_rps"`
	// ChurnRPS is the traffic moved relative to the previous weights
	// (sum of |x - previous|, in rps).
	ChurnRPS float64 `json:"churn_rps"`
	// ClusterLatencyMs is each cluster's expected mean end-to-end latency.
	ClusterLatencyMs map[string]float64 `json:"cluster_latency_ms"`
	// Explanations[cluster] lists, sorted by engine id, every engine the
	// cluster may use (it has an rtt_ms entry) or used previously.
	Explanations map[string][]Explanation `json:"explanations,omitempty"`

	demand map[string]float64
}

// EngineState is an engine's planned load.
type EngineState struct {
	LoadRPS     float64 `json:"load_rps"`
	Utilization float64 `json:"utilization"`
	// EngineMs is the engine's latency at the planned load.
	EngineMs float64 `json:"engine_ms"`
	// MarginalMs is the engine's dual price: the marginal latency of one
	// more rps (including the capacity multiplier when it is full).
	MarginalMs float64 `json:"marginal_ms"`
}

// Explanation says why cluster traffic got its weight on one engine.
type Explanation struct {
	Engine             string  `json:"engine"`
	Weight             float64 `json:"weight"`
	NetworkMs          float64 `json:"network_ms"`
	EngineMs           float64 `json:"engine_ms"`
	MarginalMs         float64 `json:"marginal_ms"`
	PlannedUtilization float64 `json:"planned_utilization"`
	// Binding lists the constraints that bind: "capacity" (the engine is
	// at max_utilization), "unhealthy", "residency" (no rtt_ms entry),
	// "zero" (weight 0 because the engine is dearer at the margin than
	// the cluster's price), "churn" (held at the previous weight, or
	// keeping traffic on an engine dearer at the margin than the
	// cluster's cheapest because moving it would cost more than it gains).
	Binding []string `json:"binding,omitempty"`
}

// PriceTolerance is how far above a cluster's lowest marginal latency
// low an engine's marginal latency may be and still count as sharing it
// (the solve's convergence tolerance: 0.1%, at least 0.01 ms). Explain
// uses the same bound.
func PriceTolerance(low float64) float64 { return math.Max(1e-3*math.Abs(low), 0.01) }

// solution turns the final flows into the published plan: exact hard
// constraints, weights and shed fractions, engine states and one
// explanation per (cluster, engine) pair worth explaining.
func (s *solver) solution(gap float64, iters int) *Solution {
	p := s.p
	s.enforceConstraints()
	_, latency := s.primal()
	for j, v := range s.pi { // never publish a NaN price
		if math.IsNaN(v) || math.IsInf(v, 0) {
			s.pi[j] = 0
		}
	}
	if math.IsNaN(gap) || math.IsInf(gap, 0) || gap > 1 {
		gap = 1 // no useful certificate
	}
	nc := len(p.clusterID)
	sol := &Solution{
		Weights:          make(map[string]map[string]float64, nc),
		Shed:             make(map[string]float64, nc),
		Engines:          make(map[string]EngineState, len(p.engineID)),
		DualityGap:       gap,
		Iterations:       iters,
		ClusterLatencyMs: make(map[string]float64, nc),
		Explanations:     make(map[string][]Explanation, nc),
		demand:           make(map[string]float64, nc),
	}
	ex := s.newExplainer()
	for j, id := range p.engineID {
		st := EngineState{LoadRPS: s.load[j], Utilization: ex.engU[j]}
		if p.usable[j] {
			st.EngineMs = ex.engMs[j]
			st.MarginalMs = s.pi[j]
		}
		sol.Engines[id] = st
	}
	routedTotal := 0.0
	for i, cid := range p.clusterID {
		D := p.demand[i]
		w, sum := s.clusterWeights(i)
		if D > 0 {
			routedTotal += float64(sum * D)
		}
		shed := math.Max(0, 1-sum)
		if shed < 1e-9 { // flow rounding, not shedding
			shed = 0
		}
		sol.Shed[cid] = shed
		sol.TotalShedRPS += shed * D
		ex.explainCluster(sol, i, w, sum)
		sol.demand[cid] = D
	}
	if routedTotal > 0 {
		sol.ObjectiveMs = latency / routedTotal
	}
	return sol
}

// enforceConstraints makes the flows meet the hard constraints exactly
// against rounding: softmax dust is dropped, engines over capacity are
// scaled down, and the loads are recomputed (and clamped to capacity).
func (s *solver) enforceConstraints() {
	p := s.p
	for j := range s.load {
		s.load[j] = 0
	}
	for i := range p.demand {
		for e := p.start[i]; e < p.start[i+1]; e++ {
			// Drop softmax dust (below 1e-14 of the cluster's traffic; at
			// most 6.6e-10 of it in total even over 65536 engines).
			if !(s.x[e] > 1e-14*s.routed[i]) {
				s.x[e] = 0
			}
			s.load[p.eng[e]] += s.x[e]
		}
	}
	for e := range s.x {
		j := p.eng[e]
		if c := p.curves[j].cap; s.load[j] > c {
			s.x[e] *= c / s.load[j]
		}
	}
	for j := range s.load {
		s.load[j] = 0
	}
	for e, x := range s.x {
		s.load[p.eng[e]] += x
	}
	for j := range s.load {
		s.load[j] = math.Min(s.load[j], p.curves[j].cap)
	}
}

// clusterWeights returns cluster i's weight per edge (in the scratch
// s.xs) and their sum, at most 1. A cluster without demand is pointed at
// its cheapest engine at the margin with room, so new traffic has
// somewhere sensible to go.
func (s *solver) clusterWeights(i int) (w []float64, sum float64) {
	p := s.p
	D := p.demand[i]
	lo, hi := int(p.start[i]), int(p.start[i+1])
	w = s.xs[:0]
	for range hi - lo {
		w = append(w, 0)
	}
	if D > 0 {
		for e := lo; e < hi; e++ {
			w[e-lo] = s.x[e] / D
			sum += w[e-lo]
		}
		if sum > 1 {
			for k := range w {
				w[k] /= sum
			}
			sum = 1
		}
		return w, sum
	}
	best, bestCost := -1, math.Inf(1)
	for e := lo; e < hi; e++ {
		j := p.eng[e]
		if s.load[j] >= p.curves[j].cap {
			continue
		}
		if c := p.rtt[e] + s.pi[j]; c < bestCost {
			best, bestCost = e, c
		}
	}
	if best >= 0 {
		w[best-lo] = 1
		sum = 1
	}
	return w, sum
}

// explainer builds the explanations of one solution. They share one
// backing array, and Binding lists are shared between explanations with
// the same constraints (capacity-limited, so an append by a caller
// copies).
type explainer struct {
	s         *solver
	all       []Explanation
	binds     []string
	edgeBinds [8][]string // by mask: capacity 1, churn 2, zero 4
	// Per engine: latency at its load, utilization, and whether it is
	// at capacity (used by every explanation that names it).
	engMs, engU []float64
	engFull     []bool
}

func (s *solver) newExplainer() *explainer {
	p := s.p
	nBlocked := 0
	for i := range p.blocked {
		nBlocked += len(p.blocked[i])
	}
	ne := len(p.engineID)
	ex := &explainer{
		s:       s,
		all:     make([]Explanation, 0, len(p.eng)+nBlocked),
		binds:   make([]string, 0, 2*nBlocked),
		engMs:   make([]float64, ne),
		engU:    make([]float64, ne),
		engFull: make([]bool, ne),
	}
	for j := range p.engineID {
		c := &p.curves[j]
		ex.engMs[j] = c.f(s.load[j])
		ex.engU[j] = s.utilization(j)
		ex.engFull[j] = s.load[j] >= c.cap*(1-1e-9)
	}
	return ex
}

// utilization is engine j's planned utilization (at most max_utilization).
func (s *solver) utilization(j int) float64 {
	if s.p.capRPS[j] <= 0 {
		return 0
	}
	return math.Min(s.load[j]/s.p.capRPS[j], s.p.maxU)
}

// bind returns a capacity-limited list of names in the shared backing.
func (ex *explainer) bind(names ...string) []string {
	k := len(ex.binds)
	ex.binds = append(ex.binds, names...)
	return ex.binds[k:len(ex.binds):len(ex.binds)]
}

// edgeBind returns the shared Binding list for mask (capacity 1, churn 2,
// zero 4).
func (ex *explainer) edgeBind(mask int) []string {
	if ex.edgeBinds[mask] == nil {
		var b []string
		for k, name := range []string{"capacity", "churn", "zero"} {
			if mask&(1<<k) != 0 {
				b = append(b, name)
			}
		}
		ex.edgeBinds[mask] = b[:len(b):len(b)]
	}
	return ex.edgeBinds[mask]
}

// explainCluster records cluster i's weights w (summing to sum), its
// explanations in engine order (its edges merged with its blocked
// engines), its expected latency and its churn in sol.
func (ex *explainer) explainCluster(sol *Solution, i int, w []float64, sum float64) {
	s, p := ex.s, ex.s.p
	cid := p.clusterID[i]
	lo, hi := int(p.start[i]), int(p.start[i+1])
	nw := 0
	for e := lo; e < hi; e++ {
		if w[e-lo] > 0 {
			nw++
		}
	}
	ws := make(map[string]float64, nw)
	n := len(ex.all)
	expl := ex.all[n : n : n+hi-lo+len(p.blocked[i])]
	latSum := 0.0
	b := 0
	// The cluster's lowest marginal latency over the engines it uses:
	// without a binding constraint, every engine with traffic has it.
	low := math.Inf(1)
	for e := lo; e < hi; e++ {
		if w[e-lo] > 0 {
			low = math.Min(low, p.rtt[e]+s.pi[p.eng[e]])
		}
	}
	for e := lo; e < hi; e++ {
		j := p.eng[e]
		expl, b = ex.appendBlocked(expl, i, b, j)
		x := Explanation{
			Engine:             p.engineID[j],
			Weight:             w[e-lo],
			NetworkMs:          p.rtt[e],
			EngineMs:           ex.engMs[j],
			MarginalMs:         p.rtt[e] + s.pi[j],
			PlannedUtilization: ex.engU[j],
		}
		mask := 0
		if ex.engFull[j] {
			mask |= 1
		}
		if p.cw > 0 && p.prev[e] > 0 && math.Abs(s.x[e]-p.prev[e]) <= 1e-9*(1+p.prev[e]) {
			mask |= 2
		}
		if p.cw > 0 && x.Weight > 0 && !ex.engFull[j] && x.MarginalMs > low+PriceTolerance(low) {
			mask |= 2 // the churn term keeps this traffic where it is
		}
		if x.Weight == 0 {
			mask |= 4
		}
		if mask != 0 {
			x.Binding = ex.edgeBind(mask)
		}
		if x.Weight > 0 {
			ws[x.Engine] = x.Weight
			latSum += x.Weight * (x.NetworkMs + x.EngineMs)
		}
		sol.ChurnRPS += math.Abs(s.x[e] - p.prev[e])
		expl = append(expl, x)
	}
	expl, _ = ex.appendBlocked(expl, i, b, math.MaxInt32)
	ex.all = ex.all[:n+len(expl)]
	sol.Weights[cid] = ws
	sol.Explanations[cid] = expl
	if sum > 0 {
		sol.ClusterLatencyMs[cid] = latSum / sum
	} else {
		sol.ClusterLatencyMs[cid] = 0
	}
}

// appendBlocked appends the explanations of cluster i's blocked engines
// from index b on with engine index below upto, and returns the next b.
func (ex *explainer) appendBlocked(expl []Explanation, i, b int, upto int32) ([]Explanation, int) {
	p := ex.s.p
	for ; b < len(p.blocked[i]) && p.blocked[i][b].engine < upto; b++ {
		be := p.blocked[i][b]
		net := be.rtt
		if math.IsNaN(net) {
			net = 0
		}
		x := Explanation{Engine: p.engineID[be.engine], NetworkMs: net,
			PlannedUtilization: ex.engU[be.engine]}
		if be.reason == "residency" && !p.healthy[be.engine] {
			x.Binding = ex.bind(be.reason, "unhealthy")
		} else {
			x.Binding = ex.bind(be.reason)
		}
		expl = append(expl, x)
	}
	return expl, b
}

// Stats returns the solve statistics for a snapshot.
func (s *Solution) Stats() *schemas.SolveStats {
	return &schemas.SolveStats{
		Solver:       SolverName,
		ObjectiveMs:  s.ObjectiveMs,
		DualityGap:   s.DualityGap,
		Iterations:   uint32(min(max(s.Iterations, 0), math.MaxUint32)),
		SolveMs:      s.SolveMs,
		TotalShedRps: s.TotalShedRPS,
	}
}

// ClusterWeights converts the solution to snapshot entries, one per
// cluster sorted by cluster id, each listing the engines of its
// explanations sorted by engine id (zero weights included, so `explain`
// can say why). endpoints maps engine id to endpoint URL; missing ids get
// an empty URL.
func (s *Solution) ClusterWeights(endpoints map[string]string) []*schemas.ClusterWeights {
	out := make([]*schemas.ClusterWeights, 0, len(s.Explanations))
	for _, cid := range sortedKeys(s.Explanations) {
		cw := &schemas.ClusterWeights{
			Cluster:           cid,
			ShedFraction:      s.Shed[cid],
			DemandRps:         s.demand[cid],
			ExpectedLatencyMs: s.ClusterLatencyMs[cid],
		}
		for _, ex := range s.Explanations[cid] {
			cw.Weights = append(cw.Weights, &schemas.EngineWeight{
				EngineId:    ex.Engine,
				EndpointUrl: endpoints[ex.Engine],
				Weight:      ex.Weight,
				Explanation: &schemas.Explanation{
					NetworkMs:  ex.NetworkMs,
					EngineMs:   ex.EngineMs,
					MarginalMs: ex.MarginalMs,
					Binding:    append([]string(nil), ex.Binding...),
				},
				PlannedUtilization: ex.PlannedUtilization,
			})
		}
		out = append(out, cw)
	}
	return out
}
