package optimizer

import "math"

// The smoothed dual of the Newton phase: its value, gradient and Hessian
// terms at given cluster prices, and the flows it recovers. Without churn
// arcs every engine sees a softmax over its clusters' bids; with them
// (newtonState.ar != nil) each engine's smoothed subproblem over capped
// and uncapped arcs is solved for its price m (see arcs). Either way the
// Hessian is a sum of one diagonal-plus-rank-one term per engine.

// eval returns the smoothed dual F at mu and temperature tau, fills h.grad
// and records each engine's Hessian term in h (assembled by hess only at
// accepted points, not at rejected trials).
func (nt *newtonState) eval(mu []float64, tau float64, h *hessTerms) float64 {
	h.reset()
	grad, routed := h.grad, nt.s.routed
	f := 0.0
	for a, i := range nt.act {
		f += float64(mu[a] * routed[i])
		grad[a] = routed[i]
	}
	if nt.ar != nil {
		return nt.evalArcs(mu, tau, h, f)
	}
	return nt.evalSoftmax(mu, tau, h, f)
}

// evalSoftmax subtracts each engine's conjugate H_j(m_j) from f and its
// supply times the softmax from the gradient.
func (nt *newtonState) evalSoftmax(mu []float64, tau float64, h *hessTerms, f float64) float64 {
	p, s := nt.p, nt.s
	grad := h.grad
	eStart, ePos, eRTT, cut := nt.eStart, nt.ePos, nt.eRTT, nt.cut
	itau := 1 / tau
	for j := range p.curves {
		lo, hi := eStart[j], eStart[j+1]
		if lo == hi {
			continue
		}
		pj, rj := ePos[lo:hi], eRTT[lo:hi]
		best := math.Inf(-1)
		for k, a := range pj {
			if b := mu[a] - rj[k]; b > best {
				best = b
			}
		}
		start := len(h.ents)
		sum := 0.0
		for k, a := range pj {
			z := (mu[a] - rj[k] - best) * itau
			if z < cut {
				continue
			}
			w := math.Exp(z)
			h.ents = append(h.ents, a)
			h.vals = append(h.vals, w)
			sum += w
		}
		ents, probs := h.ents[start:], h.vals[start:]
		nt.nEval++
		nt.nEnts += len(ents)
		m := best + float64(tau*math.Log(sum))
		c := &p.curves[j]
		L, dL := c.inv(m)
		if s.fullEngine[j] {
			L, dL = c.cap, 0
		}
		f -= m*L - c.g(L)
		inv := 1 / sum
		for k, a := range ents {
			probs[k] *= inv
			grad[a] -= L * probs[k]
		}
		h.end(L/tau, dL)
	}
	return f
}

// evalArcs solves each engine's smoothed subproblem over its churn arcs,
// subtracts its term from f and its arc flows from the gradient, and
// records per engine the clusters with free arcs (below their caps): their
// flow (vals) and, for the predictor, their -x log x (ext).
func (nt *newtonState) evalArcs(mu []float64, tau float64, h *hessTerms, f float64) float64 {
	p, s, ar := nt.p, nt.s, nt.ar
	grad, sAcc, sLog := h.grad, nt.sAcc, nt.sLog
	for j := range p.curves {
		if ar.start[j] == ar.start[j+1] {
			continue
		}
		phi, dS, m := s.engine(ar, j, mu, tau)
		f -= phi
		start := len(h.ents)
		free := 0.0
		for k, x := range ar.x {
			arc := ar.idx[k]
			a := ar.pos[arc]
			grad[a] -= x
			if x < ar.cap[arc] && x > 0 { // x == 0 (underflow) would list a twice
				if sAcc[a] == 0 {
					h.ents = append(h.ents, a)
				}
				sAcc[a] += x
				// -x log x = x (m - bid)/tau for the predictor
				sLog[a] += x * (ar.bid[k] - m) / tau
				free += x
			}
		}
		for _, u := range h.ents[start:] {
			h.vals = append(h.vals, sAcc[u])
			h.ext = append(h.ext, -sLog[u])
			sAcc[u], sLog[u] = 0, 0
		}
		h.end(free/tau+dS, 0)
	}
	return f
}

// hess assembles the Hessian (upper triangle by cluster position) of the
// terms in h into nt.qd.
func (nt *newtonState) hess(h *hessTerms, tau float64) {
	clear(nt.qd)
	if nt.ar != nil {
		nt.hessArcs(h, tau)
	} else {
		nt.hessSoftmax(h)
	}
}

// hessSoftmax adds per engine lt*diag(p) + (dL - lt)*p*p^T. ents is
// increasing (byEngine lists an engine's edges in cluster order), so the
// upper triangle is v >= u.
func (nt *newtonState) hessSoftmax(h *hessTerms) {
	n, qd := nt.n, nt.qd
	for r := range h.a {
		ents, probs := h.ents[h.off[r]:h.off[r+1]], h.vals[h.off[r]:h.off[r+1]]
		lt, dL := h.a[r], h.b[r]
		for u, au := range ents {
			pu := probs[u]
			row := qd[int(au)*n : int(au+1)*n]
			row[au] += lt * pu
			cu := (dL - lt) * pu
			pv := probs[u:]
			for v, av := range ents[u:] {
				row[av] += float64(cu * pv[v])
			}
		}
	}
}

// hessArcs adds per engine diag(s/tau) - (s/tau)(s/tau)^T/den, s the
// clusters' free arc flows and den = free/tau + dSupply.
func (nt *newtonState) hessArcs(h *hessTerms, tau float64) {
	n, qd := nt.n, nt.qd
	sv := nt.sv
	for r := range h.a {
		touched, acc := h.ents[h.off[r]:h.off[r+1]], h.vals[h.off[r]:h.off[r+1]]
		den := h.a[r]
		// touched is increasing (arcs are listed in cluster
		// order), so the upper triangle of row u is the suffix.
		sv = sv[:0]
		for _, a := range acc {
			sv = append(sv, a/tau)
		}
		for k, u := range touched {
			su := sv[k]
			row := qd[int(u)*n : int(u+1)*n]
			row[u] += su
			if den > 0 {
				cu := su / den
				for l := k; l < len(touched); l++ {
					row[touched[l]] -= cu * sv[l]
				}
			}
		}
	}
	nt.sv = sv
}

// recoverFlows sets s.x to the flows and s.mu to the prices at nt.mu.
func (nt *newtonState) recoverFlows(tau float64) {
	s := nt.s
	for e := range s.x {
		s.x[e] = 0
	}
	if nt.ar != nil {
		nt.recoverArcFlows(tau)
	} else {
		nt.recoverSoftmaxFlows(tau)
	}
	nt.publishPrices()
}

func (nt *newtonState) recoverArcFlows(tau float64) {
	s, p, ar := nt.s, nt.p, nt.ar
	for j := range p.curves {
		if ar.start[j] == ar.start[j+1] {
			continue
		}
		s.engine(ar, j, nt.mu, tau)
		for k, x := range ar.x {
			s.x[ar.edge[ar.idx[k]]] += x
		}
	}
}

func (nt *newtonState) recoverSoftmaxFlows(tau float64) {
	s, p, mu, pos, cut := nt.s, nt.p, nt.mu, nt.pos, nt.cut
	for j := range p.curves {
		if !p.usable[j] {
			continue
		}
		edges := s.byEngine[s.engStart[j]:s.engStart[j+1]]
		best := math.Inf(-1)
		for _, e := range edges {
			if a := pos[s.edgeCluster[e]]; a >= 0 {
				best = math.Max(best, mu[a]-s.effRTT(e))
			}
		}
		if math.IsInf(best, -1) {
			continue
		}
		sum := 0.0
		for _, e := range edges {
			if a := pos[s.edgeCluster[e]]; a >= 0 {
				if z := (mu[a] - s.effRTT(e) - best) / tau; z >= cut {
					sum += math.Exp(z)
				}
			}
		}
		m := best + float64(tau*math.Log(sum))
		L, _ := p.curves[j].inv(m)
		if s.fullEngine[j] {
			L = p.curves[j].cap
		}
		for _, e := range edges {
			if a := pos[s.edgeCluster[e]]; a >= 0 {
				if z := (mu[a] - s.effRTT(e) - best) / tau; z >= cut {
					s.x[e] = L * math.Exp(z) / sum
				}
			}
		}
	}
}

// publishPrices copies nt.mu to s.mu. Prices of clusters that only use
// always-full engines are fixed up to a common shift; they are raised
// until every such engine's price is at least its marginal latency at
// capacity, which makes the prices valid for the unsmoothed dual. A NaN
// price becomes +Inf, which newton's deferred check catches.
func (nt *newtonState) publishPrices() {
	s, p, mu := nt.s, nt.p, nt.mu
	shift := 0.0
	for j := range p.curves {
		if !s.fullEngine[j] || nt.eStart[j] == nt.eStart[j+1] {
			continue
		}
		best := math.Inf(-1)
		for k := nt.eStart[j]; k < nt.eStart[j+1]; k++ {
			if a := nt.ePos[k]; s.tightCluster[nt.act[a]] {
				best = math.Max(best, mu[a]-nt.eRTT[k])
			}
		}
		if !math.IsInf(best, -1) {
			shift = math.Max(shift, p.curves[j].dLeft(p.curves[j].cap)-best)
		}
	}
	for a, i := range nt.act {
		s.mu[i] = mu[a]
		if s.tightCluster[i] {
			s.mu[i] += shift
		}
		if math.IsNaN(s.mu[i]) {
			s.mu[i] = math.Inf(1)
		}
	}
}

// hessTerms records one evaluation of the smoothed dual: its gradient
// and, per engine, the cluster positions ents and values vals (offsets
// off) with two coefficients a, b from which the engine's Hessian term
// is assembled.
type hessTerms struct {
	grad []float64
	ents []int32
	vals []float64
	ext  []float64 // churn: sum over the cluster's free arcs of -x log x
	off  []int32
	a, b []float64
}

func newHessTerms(n int) *hessTerms {
	return &hessTerms{grad: make([]float64, n), off: []int32{0}}
}

func (h *hessTerms) reset() {
	h.ents, h.vals, h.ext, h.off, h.a, h.b = h.ents[:0], h.vals[:0], h.ext[:0], h.off[:1], h.a[:0], h.b[:0]
}

// end closes the current engine's record.
func (h *hessTerms) end(a, b float64) {
	h.off = append(h.off, int32(len(h.ents)))
	h.a = append(h.a, a)
	h.b = append(h.b, b)
}

// predictSoftmax sets dg to dgrad/dtau at the evaluation h (no churn):
// with H_j the entropy of engine j's softmax p_j,
//
//	dgrad_i/dtau = -sum_j [dL_j H_j p_ij + L_j/tau p_ij (-log p_ij - H_j)].
func predictSoftmax(h *hessTerms, dg []float64) {
	clear(dg)
	for r := range h.a {
		ents, probs := h.ents[h.off[r]:h.off[r+1]], h.vals[h.off[r]:h.off[r+1]]
		lt, dL := h.a[r], h.b[r]
		ent := 0.0
		for _, pu := range probs {
			if pu > 0 {
				ent -= pu * math.Log(pu)
			}
		}
		for u, a := range ents {
			pu := probs[u]
			lp := 0.0
			if pu > 0 {
				lp = math.Log(pu)
			}
			dg[a] -= float64(dL*ent*pu) + float64(lt*pu*(-lp-ent))
		}
	}
}

// predictArcs sets dg to dgrad/dtau at the evaluation h with churn arcs:
// a free arc carries x = exp((bid - m)/tau), so
// dx/dtau = x(-log x - dm/dtau)/tau, and the engine price moves so that
// the free arcs follow the supply: dm/dtau = sum_free (-x log x)/tau / den
// (den = free/tau + dL, as in the Hessian).
func predictArcs(h *hessTerms, tau float64, dg []float64) {
	clear(dg)
	for r := range h.a {
		lo, hi := h.off[r], h.off[r+1]
		ents, acc, xl := h.ents[lo:hi], h.vals[lo:hi], h.ext[lo:hi]
		den := h.a[r]
		dm := 0.0
		if den > 0 {
			for _, v := range xl {
				dm += v
			}
			dm /= tau * den
		}
		for k, a := range ents {
			dg[a] -= (xl[k] - dm*acc[k]) / tau
		}
	}
}
