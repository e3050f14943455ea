package optimizer

import (
	"math"
	"slices"
)

// up and down are the marginal costs of raising and of lowering the flow
// on edge e (network plus churn, without the engine term).
func (s *solver) up(e int) float64 {
	if s.p.cw == 0 {
		return s.p.rtt[e]
	}
	if s.x[e] >= s.p.prev[e] {
		return s.p.rtt[e] + s.p.cw
	}
	return s.p.rtt[e] - s.p.cw
}

func (s *solver) down(e int) float64 {
	if s.p.cw == 0 {
		return s.p.rtt[e]
	}
	if s.x[e] > s.p.prev[e] {
		return s.p.rtt[e] + s.p.cw
	}
	return s.p.rtt[e] - s.p.cw
}

// primal is the objective: total latency rate plus churn (ms*rps).
func (s *solver) primal() (total, latency float64) {
	p := s.p
	for e, x := range s.x {
		latency += float64(x * p.rtt[e])
		total += float64(p.cw * math.Abs(x-p.prev[e]))
	}
	for j, l := range s.load {
		if p.usable[j] {
			latency += p.curves[j].g(l)
		}
	}
	return total + latency, latency
}

// bounds returns the primal objective and a Lagrangian lower bound on
// the optimum, and leaves the dual prices in s.pi and s.dmu.
func (s *solver) bounds() (primal, dual float64) {
	primal, _ = s.primal()
	dual = s.enginePrices()
	dual = s.clusterTerms(dual)
	// Churn on edges that are no longer allowed is a constant of both
	// problems and left out of both.
	if dm := s.muDual(); dm > dual || math.IsNaN(dual) {
		dual = dm
	}
	if math.IsNaN(dual) {
		dual = math.Inf(-1)
	}
	return primal, dual
}

// enginePrices sets the engine prices s.pi: the flow-weighted mean of
// what the clusters using the engine pay at the margin, kept near the
// subdifferential of g at the current load. Any price gives a valid bound
// because the engine term min_L g(L) - pi*L is evaluated exactly; it
// returns the sum of those terms.
func (s *solver) enginePrices() (dual float64) {
	p := s.p
	for j := range s.pi {
		s.pi[j], s.piW[j] = 0, 0
	}
	tiny := 1e-12
	for i := range p.demand {
		if math.IsNaN(s.mu[i]) {
			continue
		}
		for e := p.start[i]; e < p.start[i+1]; e++ {
			if x := s.x[e]; x > tiny {
				j := p.eng[e]
				sigma := 0.0
				if p.cw > 0 && x < p.prev[e] {
					sigma = -p.cw
				} else if p.cw > 0 && x > p.prev[e] {
					sigma = p.cw
				}
				s.pi[j] += float64(x * (s.mu[i] - p.rtt[e] - sigma))
				s.piW[j] += x
			}
		}
	}
	for j := range s.pi {
		if !p.usable[j] {
			s.pi[j] = 0
			continue
		}
		c := &p.curves[j]
		l := s.load[j]
		d := float64(0.01 * c.cap)
		lo, hi := c.dLeft(math.Max(0, l-d)), c.dRight(math.Min(c.cap, l+d))
		if l-d <= 0 {
			lo = math.Inf(-1)
		}
		if l+d >= c.cap {
			hi = math.Inf(1)
		}
		v := c.dRight(math.Min(l, c.cap*(1-1e-12)))
		if s.piW[j] > 0 {
			v = s.pi[j] / s.piW[j]
		}
		v = math.Min(math.Max(v, lo), hi)
		if math.IsInf(v, 0) || math.IsNaN(v) {
			v = c.f(l)
		}
		s.pi[j] = v
		ls, _ := c.inv(v)
		dual += c.g(ls) - v*ls
	}
	return dual
}

// breakpoint is a previous edge's churn breakpoint in a cluster's dual
// term: the price t below which its previous rps are kept.
type breakpoint struct{ t, prev float64 }

// clusterTerms adds each cluster's term of the dual at the engine prices
// s.pi to dual (min over x of the cluster's cost minus what the engines
// are paid), leaving its price in s.dmu, and returns the sum.
func (s *solver) clusterTerms(dual float64) float64 {
	p := s.p
	var brk []breakpoint
	for i := range p.demand {
		R := s.routed[i]
		lo, hi := int(p.start[i]), int(p.start[i+1])
		if hi == lo {
			continue
		}
		if p.cw == 0 {
			m := math.Inf(1)
			for e := lo; e < hi; e++ {
				m = math.Min(m, p.rtt[e]+s.pi[p.eng[e]])
			}
			s.dmu[i] = m
			dual += float64(m * R)
			continue
		}
		var phi float64
		phi, brk = s.churnClusterTerm(i, brk)
		dual += phi
	}
	return dual
}

// churnClusterTerm is cluster i's dual term with churn: the cluster
// price m is where its cheap (previous) capacity runs out or the
// cheapest uncapped edge, and every previous edge pays for the churn it
// keeps. brk is scratch, returned for reuse.
func (s *solver) churnClusterTerm(i int, brk []breakpoint) (float64, []breakpoint) {
	p := s.p
	R := s.routed[i]
	lo, hi := int(p.start[i]), int(p.start[i+1])
	muMax := math.Inf(1)
	brk = brk[:0]
	for e := lo; e < hi; e++ {
		c := p.rtt[e] + s.pi[p.eng[e]]
		muMax = math.Min(muMax, c+p.cw)
		if p.prev[e] > 0 {
			brk = append(brk, breakpoint{c - p.cw, p.prev[e]})
		}
	}
	slices.SortFunc(brk, func(a, b breakpoint) int {
		switch {
		case a.t < b.t:
			return -1
		case a.t > b.t:
			return 1
		}
		return 0
	})
	m, acc := muMax, 0.0
	for _, b := range brk {
		if b.t >= muMax {
			break
		}
		acc += b.prev
		if acc > R {
			m = b.t
			break
		}
	}
	s.dmu[i] = m
	phi := m * R
	for e := lo; e < hi; e++ {
		if p.prev[e] == 0 {
			continue
		}
		c := p.rtt[e] + s.pi[p.eng[e]] - m
		if c >= p.cw {
			phi += float64(p.prev[e] * p.cw)
		} else {
			phi += float64(p.prev[e] * c)
		}
	}
	return phi, brk
}

// muDual is the Lagrangian dual value at the cluster prices s.mu (NaN
// prices leave their cluster out, valid when its routed amount is 0):
//
//	D(mu) = sum_i mu_i R_i + sum_e const_e - sum_j max_{x>=0, L<=cap} [sum_a bid_a x_a - g_j(L)]
//
// where each edge contributes arcs with bids mu_i - r_ij -/+ churn (the
// first prev_ij rps of an edge earn the churn back). It is a lower bound
// on the optimum for any mu.
func (s *solver) muDual() float64 {
	p := s.p
	if s.byEngine == nil {
		s.indexEngines()
	}
	d := 0.0
	for i := range p.demand {
		if s.routed[i] > 0 && math.IsNaN(s.mu[i]) {
			return math.Inf(-1)
		}
		if !math.IsNaN(s.mu[i]) {
			d += float64(s.mu[i] * s.routed[i])
		}
	}
	var arcs []bidArc
	for j := range p.curves {
		if !p.usable[j] {
			continue
		}
		d, arcs = s.muDualEngine(j, d, arcs)
	}
	return d
}

// bidArc is an arc of an engine's subproblem in muDual: a bid per rps and
// a capacity.
type bidArc struct{ bid, cap float64 }

// muDualEngine adds engine j's terms of muDual to d (the churn constants
// of its previous edges, minus its subproblem's value) and returns d and
// the arcs scratch for reuse.
func (s *solver) muDualEngine(j int, d float64, arcs []bidArc) (float64, []bidArc) {
	p := s.p
	c := &p.curves[j]
	floor := c.dRight(0)
	arcs = arcs[:0]
	top := math.Inf(-1) // best uncapped bid
	for _, e := range s.byEngine[s.engStart[j]:s.engStart[j+1]] {
		i := s.edgeCluster[e]
		if math.IsNaN(s.mu[i]) {
			if p.prev[e] > 0 {
				d += float64(p.cw * p.prev[e]) // x = 0 is forced
			}
			continue
		}
		base := s.mu[i] - p.rtt[e]
		if p.prev[e] > 0 {
			d += float64(p.cw * p.prev[e])
			if b := base + p.cw; b > floor {
				arcs = append(arcs, bidArc{b, p.prev[e]})
			}
		}
		top = math.Max(top, base-p.cw)
	}
	// Only capped arcs bidding above the best uncapped one can be
	// filled before it; the uncapped one ends the fill.
	k := 0
	for _, a := range arcs {
		if a.bid > top {
			arcs[k] = a
			k++
		}
	}
	arcs = arcs[:k]
	if top > floor {
		arcs = append(arcs, bidArc{top, math.Inf(1)})
	}
	if len(arcs) == 0 {
		return d, arcs
	}
	slices.SortFunc(arcs, func(a, b bidArc) int {
		switch {
		case a.bid > b.bid:
			return -1
		case a.bid < b.bid:
			return 1
		}
		return 0
	})
	// Fill arcs in bid order while the marginal cost stays below the bid.
	L, rev := 0.0, 0.0
	for _, a := range arcs {
		target, _ := c.inv(a.bid)
		if target <= L {
			break
		}
		take := math.Min(target-L, a.cap)
		L += take
		rev += float64(a.bid * take)
		if take < a.cap {
			break
		}
	}
	d -= rev - c.g(L)
	return d, arcs
}
