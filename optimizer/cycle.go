package optimizer

import "math"

// cancelCycle looks for a negative-cost cycle of flow exchanges in the
// residual graph reduced to cluster nodes plus a load node t, and pushes
// flow around it with an exact line search. It reports whether it found
// one. Arcs:
//
//	i -> k via j: cluster i raises its flow on j, cluster k lowers it
//	              (j's load unchanged), cost up(ij) - down(kj);
//	i -> t via j: cluster i raises its flow on j, cost up(ij) + g'+(L_j);
//	t -> k via j: cluster k lowers its flow on j, cost -down(kj) - g'-(L_j).
func (s *solver) cancelCycle() bool {
	if s.byEngine == nil {
		s.indexEngines()
	}
	g := s.exchangeGraph()
	arcs := g.negativeCycle()
	if arcs == nil {
		return false
	}
	// Direction: +1 on raised edges, -1 on lowered ones.
	dEdge := map[int32]float64{}
	for _, a := range arcs {
		if g.via[a] >= 0 {
			dEdge[g.via[a]]++
		}
		if g.low[a] >= 0 {
			dEdge[g.low[a]]--
		}
	}
	return s.lineSearch(dEdge)
}

// exchangeGraph is cancelCycle's dense graph on the clusters plus the
// load node t = n-1: arc u*n+v costs w, raises edge via (-1: none) and
// lowers edge low (-1: none).
type exchangeGraph struct {
	n        int
	w        []float64
	via, low []int32
	scale    float64 // largest |down| seen, for the cycle tolerance
}

// exchangeGraph builds the cheapest arc between every pair of nodes at
// the current flows.
func (s *solver) exchangeGraph() *exchangeGraph {
	p := s.p
	nc := len(p.demand)
	n := nc + 1
	t := nc
	inf := math.Inf(1)
	g := &exchangeGraph{n: n, w: make([]float64, n*n), via: make([]int32, n*n), low: make([]int32, n*n), scale: 1}
	w, via, low := g.w, g.via, g.low
	for k := range w {
		w[k], via[k], low[k] = inf, -1, -1
	}
	for e, x := range s.x {
		if x <= 1e-12 {
			continue
		}
		k := s.edgeCluster[e]
		j := p.eng[e]
		dk := s.down(e)
		// t -> k via j
		c := &p.curves[j]
		if v := -dk - c.dLeft(s.load[j]); v < w[t*n+int(k)] {
			w[t*n+int(k)], via[t*n+int(k)], low[t*n+int(k)] = v, -1, int32(e)
		}
		for _, f := range s.byEngine[s.engStart[j]:s.engStart[j+1]] {
			i := s.edgeCluster[f]
			if i == k {
				continue
			}
			if v := s.up(int(f)) - dk; v < w[int(i)*n+int(k)] {
				w[int(i)*n+int(k)], via[int(i)*n+int(k)], low[int(i)*n+int(k)] = v, f, int32(e)
			}
		}
		g.scale = math.Max(g.scale, math.Abs(dk))
	}
	for e := range s.x {
		j := p.eng[e]
		c := &p.curves[j]
		if s.load[j] >= c.cap {
			continue
		}
		i := int(s.edgeCluster[e])
		if v := s.up(e) + c.dRight(s.load[j]); v < w[i*n+t] {
			w[i*n+t], via[i*n+t], low[i*n+t] = v, int32(e), -1
		}
	}
	return g
}

// negativeCycle runs Bellman-Ford from a virtual source connected to
// every node and returns the arcs (u*n+v) of a cycle cheaper than
// -1e-9*scale, or nil.
func (g *exchangeGraph) negativeCycle() []int {
	n, w := g.n, g.w
	dist := make([]float64, n)
	pred := make([]int, n)
	for k := range pred {
		pred[k] = -1
	}
	eps := 1e-9 * g.scale
	last := -1
	for round := 0; round <= n; round++ {
		last = -1
		for u := 0; u < n; u++ {
			du := dist[u]
			row := w[u*n : (u+1)*n]
			for v, c := range row {
				if du+c < dist[v]-eps {
					dist[v] = du + c
					pred[v] = u
					last = v
				}
			}
		}
		if last < 0 {
			return nil
		}
	}
	// Walk back n steps to land on the cycle, then collect it.
	v := last
	for range n {
		v = pred[v]
	}
	var arcs []int
	for u := v; ; {
		pu := pred[u]
		arcs = append(arcs, pu*n+u)
		u = pu
		if u == v {
			break
		}
		if len(arcs) > n {
			return nil
		}
	}
	return arcs
}

// indexEngines builds the engine -> edges index and edge -> cluster map.
func (s *solver) indexEngines() {
	p := s.p
	ne := len(p.curves)
	s.engStart = make([]int32, ne+1)
	for _, j := range p.eng {
		s.engStart[j+1]++
	}
	for j := 0; j < ne; j++ {
		s.engStart[j+1] += s.engStart[j]
	}
	s.byEngine = make([]int32, len(p.eng))
	fill := make([]int32, ne)
	s.edgeCluster = make([]int32, len(p.eng))
	for i := range p.demand {
		for e := p.start[i]; e < p.start[i+1]; e++ {
			j := p.eng[e]
			s.byEngine[s.engStart[j]+fill[j]] = e
			fill[j]++
			s.edgeCluster[e] = int32(i)
		}
	}
}

// lineSearch moves the flows along direction d (per edge) by the step
// that minimises the objective, keeping every constraint. It reports
// whether the objective decreased.
func (s *solver) lineSearch(d map[int32]float64) bool {
	ex := s.newExchange(d)
	if ex == nil {
		return false
	}
	smax := ex.maxStep()
	if !(smax > 0) || math.IsInf(smax, 0) {
		return false
	}
	if ex.deriv(0) >= 0 {
		return false
	}
	lo, hi := 0.0, smax
	if ex.deriv(smax*(1-1e-12)) < 0 {
		lo = smax
	} else {
		for range 60 {
			mid := 0.5 * (lo + hi)
			if ex.deriv(mid) < 0 {
				lo = mid
			} else {
				hi = mid
			}
		}
	}
	if lo <= 0 {
		return false
	}
	ex.apply(lo)
	return true
}

// exchange is a direction d (per edge) for lineSearch with its load
// change per engine; edges and engines list where d and the load change
// are non-zero, sorted.
type exchange struct {
	s              *solver
	d, dLoad       map[int32]float64
	edges, engines []int32
}

// newExchange returns the exchange along d, or nil when d is zero.
func (s *solver) newExchange(d map[int32]float64) *exchange {
	p := s.p
	ex := &exchange{s: s, d: d, dLoad: map[int32]float64{}, edges: make([]int32, 0, len(d))}
	for e, v := range d {
		if v != 0 {
			ex.edges = append(ex.edges, e)
		}
	}
	if len(ex.edges) == 0 {
		return nil
	}
	sortInt32(ex.edges)
	for _, e := range ex.edges {
		ex.dLoad[p.eng[e]] += d[e]
	}
	ex.engines = make([]int32, 0, len(ex.dLoad))
	for j, v := range ex.dLoad {
		if v != 0 {
			ex.engines = append(ex.engines, j)
		}
	}
	sortInt32(ex.engines)
	return ex
}

// maxStep is the largest feasible step: no flow below 0, no engine above
// capacity.
func (ex *exchange) maxStep() float64 {
	s, p := ex.s, ex.s.p
	smax := math.Inf(1)
	for _, e := range ex.edges {
		if ex.d[e] < 0 {
			smax = math.Min(smax, s.x[e]/-ex.d[e])
		}
	}
	for _, j := range ex.engines {
		if dl := ex.dLoad[j]; dl > 0 {
			smax = math.Min(smax, (p.curves[j].cap-s.load[j])/dl)
		}
	}
	return smax
}

// deriv is the right derivative of the objective along d at step a.
func (ex *exchange) deriv(a float64) float64 {
	s, p, d := ex.s, ex.s.p, ex.d
	v := 0.0
	for _, e := range ex.edges {
		x := s.x[e] + float64(a*d[e])
		v += float64(d[e] * p.rtt[e])
		if p.cw > 0 {
			away := (d[e] > 0 && x >= p.prev[e]) || (d[e] < 0 && x <= p.prev[e])
			if away {
				v += float64(math.Abs(d[e]) * p.cw)
			} else {
				v -= float64(math.Abs(d[e]) * p.cw)
			}
		}
	}
	for _, j := range ex.engines {
		c := &p.curves[j]
		l := s.load[j] + float64(a*ex.dLoad[j])
		if ex.dLoad[j] > 0 {
			v += float64(ex.dLoad[j] * c.dRight(l))
		} else {
			v += float64(ex.dLoad[j] * c.dLeft(l))
		}
	}
	return v
}

// apply moves the flows by step a along d and recomputes the loads of
// the engines involved.
func (ex *exchange) apply(a float64) {
	s, p := ex.s, ex.s.p
	for _, e := range ex.edges {
		s.x[e] = math.Max(0, s.x[e]+float64(a*ex.d[e]))
	}
	for _, j := range ex.engines {
		s.load[j] = 0
	}
	for _, e := range s.byEngineOf(ex.engines) {
		s.load[p.eng[e]] += s.x[e]
	}
	for _, j := range ex.engines {
		s.load[j] = math.Min(s.load[j], p.curves[j].cap)
	}
}

func (s *solver) byEngineOf(engines []int32) []int32 {
	var out []int32
	for _, j := range engines {
		out = append(out, s.byEngine[s.engStart[j]:s.engStart[j+1]]...)
	}
	return out
}

func sortInt32(a []int32) {
	for i := 1; i < len(a); i++ {
		for k := i; k > 0 && a[k] < a[k-1]; k-- {
			a[k], a[k-1] = a[k-1], a[k]
		}
	}
}
