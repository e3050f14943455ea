package optimizer

import (
	"math"

	"gonum.org/v1/gonum/mat"
)

// newton maximises the entropy-smoothed Lagrangian dual over the cluster
// prices mu (one per cluster with routed demand):
//
//	F(mu) = sum_i mu_i R_i - sum_j H_j(m_j),  m_j = tau*log sum_i exp((mu_i - r_ij)/tau)
//
// where H_j(m) = max_{0<=L<=cap_j} m*L - g_j(L) is the conjugate of the
// engine cost (its derivative is the engine's supply L_j(m), continuous
// even across profile knots). At the maximiser the flows
// x_ij = L_j(m_j) * softmax_i((mu_i - r_ij)/tau) meet every cluster's
// routed amount and every capacity, and are optimal for the problem with
// an entropy term of weight tau; tau is driven down geometrically to
// tauFinal. Each Newton step solves an nc×nc system (gonum Cholesky). It
// ignores churn (the coordinate-descent polish handles it). It leaves the
// recovered flows in s.x and the prices in s.mu.
func (s *solver) newton(tauFinal, tol float64, maxSteps int) int {
	p := s.p
	if s.byEngine == nil {
		s.indexEngines()
	}
	var act []int
	pos := make([]int, len(p.demand))
	for i := range p.demand {
		pos[i] = -1
		if s.routed[i] > 0 && p.start[i+1] > p.start[i] {
			if math.IsNaN(s.mu[i]) {
				m := math.Inf(-1)
				for e := p.start[i]; e < p.start[i+1]; e++ {
					c := &p.curves[p.eng[e]]
					m = math.Max(m, p.rtt[e]+c.dLeft(math.Max(s.load[p.eng[e]], 1e-9*c.cap)))
				}
				s.mu[i] = m
			}
			pos[i] = len(act)
			act = append(act, i)
		}
	}
	n := len(act)
	if n == 0 {
		return 0
	}
	// On any numerical failure the flows and prices are restored, so the
	// exact phase starts from the (feasible) plan it had.
	saveX := append([]float64(nil), s.x...)
	saveMu := append([]float64(nil), s.mu...)
	defer func() {
		for _, v := range s.x {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				copy(s.x, saveX)
				copy(s.mu, saveMu)
				return
			}
		}
		for _, v := range s.mu {
			if math.IsInf(v, 0) {
				copy(s.x, saveX)
				copy(s.mu, saveMu)
				return
			}
		}
	}()
	// Engine-major copy of the active edges: positions and rtts.
	eStart := make([]int32, len(p.curves)+1)
	ePos := make([]int32, 0, len(s.x))
	eRTT := make([]float64, 0, len(s.x))
	for j := range p.curves {
		if p.usable[j] {
			for _, e := range s.byEngine[s.engStart[j]:s.engStart[j+1]] {
				if a := pos[s.edgeCluster[e]]; a >= 0 {
					ePos = append(ePos, int32(a))
					eRTT = append(eRTT, s.effRTT(e))
				}
			}
		}
		eStart[j+1] = int32(len(ePos))
	}
	qd := make([]float64, n*n)
	mu := make([]float64, n)
	// Clusters that only use always-full engines compete for fixed
	// capacity; only their price differences matter, and coordinate
	// descent leaves them far apart, so start them level.
	level, nl := 0.0, 0
	for a, i := range act {
		mu[a] = s.mu[i]
		if s.tightCluster[i] {
			level += mu[a]
			nl++
		}
	}
	if nl > 0 {
		level /= float64(nl)
		for a, i := range act {
			if s.tightCluster[i] {
				mu[a] = level
			}
		}
	}
	q := mat.NewSymDense(n, nil)
	trial := make([]float64, n)
	total := 0.0
	for _, i := range act {
		total += s.routed[i]
	}

	nEval, nEnts := 0, 0
	// Softmax entries below exp(cut) are dropped: exp(-30) ~ 1e-13 in the
	// final stage, exp(-10) ~ 5e-5 in the coarse ones.
	cut := -30.0
	// An evaluation records each engine's Hessian term; the Hessian is
	// assembled (hess) only at accepted points, not at rejected trials.
	cur, next := newHessTerms(n), newHessTerms(n)
	// eval returns F, fills h.grad and records the Hessian terms in h.
	var eval func(mu []float64, tau float64, h *hessTerms) float64
	eval = func(mu []float64, tau float64, h *hessTerms) float64 {
		h.reset()
		grad := h.grad
		f := 0.0
		for a, i := range act {
			f += mu[a] * s.routed[i]
			grad[a] = s.routed[i]
		}
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
			nEval++
			nEnts += len(ents)
			m := best + tau*math.Log(sum)
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
	// hess assembles the Hessian (upper triangle by cluster position) of
	// the terms in h into qd: per engine lt*diag(p) + (dL - lt)*p*p^T.
	// ents is increasing (byEngine lists an engine's edges in cluster
	// order), so the upper triangle is v >= u.
	hess := func(h *hessTerms, tau float64, qd []float64) {
		clear(qd)
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
					row[av] += cu * pv[v]
				}
			}
		}
	}
	// With churn the engines see capped arcs (see arcs); the smoothed
	// engine subproblem is solved per engine for its price m, and the
	// Hessian keeps the same diagonal-plus-rank-one-per-engine form.
	var ar *arcs
	var sAcc []float64
	if p.cw > 0 && !s.approxChurn {
		ar = s.buildArcs(pos)
		for _, h := range []*hessTerms{cur, next} {
			// An evaluation lists at most every arc once.
			h.ents = make([]int32, 0, len(ar.pos))
			h.vals = make([]float64, 0, len(ar.pos))
			h.ext = make([]float64, 0, len(ar.pos))
			h.off = append(make([]int32, 0, len(p.curves)+1), 0)
			h.a = make([]float64, 0, len(p.curves))
			h.b = make([]float64, 0, len(p.curves))
		}
		sAcc = make([]float64, n)
		sLog := make([]float64, n)
		eval = func(mu []float64, tau float64, h *hessTerms) float64 {
			h.reset()
			grad := h.grad
			f := 0.0
			for a, i := range act {
				f += mu[a] * s.routed[i]
				grad[a] = s.routed[i]
			}
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
		// Per engine diag(s/tau) - (s/tau)(s/tau)^T/den.
		var sv []float64
		hess = func(h *hessTerms, tau float64, qd []float64) {
			clear(qd)
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
		}
	}
	// recoverFlows sets s.x to the flows and s.mu to the prices at mu.
	recoverFlows := func(mu []float64, tau float64) {
		for e := range s.x {
			s.x[e] = 0
		}
		if ar != nil {
			for j := range p.curves {
				if ar.start[j] == ar.start[j+1] {
					continue
				}
				s.engine(ar, j, mu, tau)
				for k, x := range ar.x {
					s.x[ar.edge[ar.idx[k]]] += x
				}
			}
		}
		for j := range p.curves {
			if !p.usable[j] || ar != nil {
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
			m := best + tau*math.Log(sum)
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
		// Prices of clusters that only use always-full engines are fixed up
		// to a common shift; raise them until every such engine's price is at
		// least its marginal latency at capacity, which makes the prices
		// valid for the unsmoothed dual.
		shift := 0.0
		for j := range p.curves {
			if !s.fullEngine[j] || eStart[j] == eStart[j+1] {
				continue
			}
			best := math.Inf(-1)
			for k := eStart[j]; k < eStart[j+1]; k++ {
				if a := ePos[k]; s.tightCluster[act[a]] {
					best = math.Max(best, mu[a]-eRTT[k])
				}
			}
			if !math.IsInf(best, -1) {
				shift = math.Max(shift, p.curves[j].dLeft(p.curves[j].cap)-best)
			}
		}
		for a, i := range act {
			s.mu[i] = mu[a]
			if s.tightCluster[i] {
				s.mu[i] += shift
			}
			if math.IsNaN(s.mu[i]) {
				s.mu[i] = math.Inf(1) // caught by the deferred check
			}
		}
	}
	// Temperature schedule: start wide (spread of network latencies),
	// shrink 8x per stage.
	tau := math.Max(tauFinal, s.tau0)
	extra := 0
	steps := 0
	var chol mat.Cholesky
	rhs := mat.NewVecDense(n, nil)
	var dir mat.VecDense
	damp := 1e-10
	dg := make([]float64, n)
	for {
		final := tau <= tauFinal
		want := 1e-2 * total
		if final {
			want = math.Min(1e-2*tol, 1e-7) * total
		}
		cut = -10
		if final {
			cut = -30
		}
		valid := false
		var f float64
		radius := math.Inf(1)
		if ar != nil {
			// Churn: the first step of a stage is limited to a price
			// move of 8 temperatures (the Newton direction can be huge
			// along flat cluster prices, and backtracking from the full
			// step took several evaluations of the dual; ~12% fewer
			// engine solves on the churn instances).
			radius = 8 * tau
		}
		hessOK := false // qd is the Hessian at cur
		bestG1, stall := math.Inf(1), 0
		checkAt := 2 * tol * total
		for it := 0; it < 60 && steps < maxSteps; it++ {
			if !valid {
				f = eval(mu, tau, cur)
				hessOK = false
				valid = true
			}
			grad := cur.grad
			g1 := 0.0
			for _, g := range grad {
				g1 += math.Abs(g)
			}
			if final && ar != nil && g1 <= checkAt {
				// Churn: the final temperature's gradient target is
				// far stricter than the gap needs (the relative gap
				// measured 0.3-8 times g1/total here, reached 10-30
				// steps before the target), so the plan is certified
				// from g1 = 2*tol*total on, again each time g1 halves,
				// and Newton stops as soon as the gap is within tol.
				recoverFlows(mu, tau)
				s.fn.repair(p, s.routed, s.x)
				s.recomputeLoads()
				pr, du := s.bounds()
				gap := relGap(pr, du)
				if s.debug != nil {
					s.debug("   certify g1 %.3g gap %.3g calls %d", g1, gap, ar.calls)
				}
				if gap <= tol {
					return steps
				}
				checkAt = 0.5 * g1
			}
			if g1 <= want {
				break
			}
			// At the limit of floating-point resolution the line search
			// accepts steps that change nothing: stop after three steps
			// without a 10% smaller gradient once it is small (the max-flow
			// repair and the exact phase take it from there).
			if g1 < 0.9*bestG1 {
				bestG1, stall = g1, 0
			} else if stall++; stall >= 3 && g1 <= 1e-5*total {
				break
			}
			steps++
			if !hessOK { // assembled only where a step is taken from
				hess(cur, tau, qd)
				hessOK = true
			}
			tr := 0.0
			for a := range n {
				tr += qd[a*n+a]
			}
			avg := tr/float64(n) + 1e-12
			improved, roundoff := false, false
			for try := 0; try < 8 && !improved && !roundoff; try++ {
				// Levenberg–Marquardt damping, raised when the step fails.
				for a := range n {
					for b := a; b < n; b++ {
						q.SetSym(a, b, qd[a*n+b])
					}
					d := qd[a*n+a] + damp*avg
					if ar != nil {
						// Churn: a cluster whose arcs all sit at their
						// caps (or carry nothing) has a zero row in the
						// Hessian, and its Newton step g/(damp*avg) was
						// huge however small its gradient, so the radius
						// cut every other cluster's step to nothing
						// (several evaluations in a row that changed
						// nothing). A per-cluster trust region instead:
						// no cluster's own step exceeds 16 temperatures
						// (on 30 churn instances 8x64 to 64x1024, 20%
						// fewer engine solves; 8 did worse, 32 about the same).
						d = math.Max(d, math.Abs(grad[a])/(16*tau))
					}
					q.SetSym(a, a, d)
					rhs.SetVec(a, grad[a])
				}
				ok := chol.Factorize(q)
				if ok {
					ok = chol.SolveVecTo(&dir, rhs) == nil
				}
				if !ok {
					damp *= 100
					continue
				}
				dmax := 0.0
				for a := range n {
					dmax = math.Max(dmax, math.Abs(dir.AtVec(a)))
				}
				slope := 0.0
				for a := range n {
					slope += grad[a] * dir.AtVec(a)
				}
				alpha := 1.0
				if dmax > 0 {
					alpha = math.Min(1, radius/dmax)
				}
				alpha0 := alpha
				for range 12 {
					// When the gain is below the resolution of f, only the
					// full Newton step is tried, and it is judged by the
					// gradient: accepted when that halves (the flows then
					// need no max-flow repair worth the name), otherwise
					// the prices are as good as floating point allows.
					tiny := alpha*slope <= 1e-13*math.Abs(f) && g1 <= 1e-6*total
					if tiny && alpha < 1 {
						roundoff = true
						break
					}
					for a := range n {
						trial[a] = mu[a] + alpha*dir.AtVec(a)
					}
					ft := eval(trial, tau, next)
					if ft >= f+1e-4*alpha*slope || (tiny && norm1(next.grad) < 0.5*g1) {
						// Step radius (largest price move tried first): twice
						// the last backtracked step, eight times larger after
						// a step taken whole. Ill-conditioned duals (sparse
						// residency near capacity) then waste far fewer
						// evaluations (12x80 residency: 45880 -> 7474
						// engine evaluations); the benchmark fleets hardly
						// backtrack at all.
						if alpha == alpha0 {
							radius *= 8
						} else {
							radius = 2 * alpha * dmax
						}
						improved = true
						f = ft
						cur, next = next, cur
						hessOK = false
						break
					}
					if tiny {
						roundoff = true
						break
					}
					// Without churn, backtrack to the maximiser of the
					// quadratic through f, the slope and ft, kept within
					// [alpha/16, alpha/2]; the stiff churn dual does better
					// with plain quartering (measured: 64x1024 churn 500
					// 405 ms quartering, 517 ms interpolating).
					next := alpha / 4
					if c := (ft - f - slope*alpha) / (alpha * alpha); ar == nil && c < 0 && !math.IsNaN(ft) {
						next = -slope / (2 * c)
					}
					alpha = math.Max(alpha/16, math.Min(alpha/2, next))
				}
				if s.debug != nil {
					dmax := 0.0
					for a := range n {
						dmax = math.Max(dmax, math.Abs(dir.AtVec(a)))
					}
					s.debug("  step tau %.3g try %d alpha %g improved %v g1 %.3g damp %g dmax %.4g step %.4g evals %d", tau, try, alpha, improved, g1, damp, dmax, alpha*dmax, nEval)
				}
				if !improved {
					damp = math.Max(damp*100, 1e-6)
				} else if alpha == 1 {
					damp = math.Max(damp/10, 1e-12)
				}
			}
			if roundoff && !improved {
				break
			}
			if !improved {
				if s.debug != nil {
					s.debug("step failed: f %v g1 %v damp %v", f, g1, damp)
				}
				break
			}
			copy(mu, trial)
		}
		if s.debug != nil {
			eval(mu, tau, next)
			g1 := 0.0
			for _, g := range next.grad {
				g1 += math.Abs(g)
			}
			s.debug("tau %.4g steps %d grad1 %.4g total %.4g", tau, steps, g1, total)
		}
		if final && ar != nil && extra < 2 && steps < maxSteps {
			// Churn: the final temperature is coarse (the gap is
			// certified on the way, see above); when that falls short,
			// go on at an 8x lower temperature, twice at most.
			extra++
			tauFinal = tau / 8
		} else if final || steps >= maxSteps {
			break
		}
		// With the predictor the temperature can drop 8x per stage
		// (4x: 64x1024 took 19 evaluations of the dual, 8x: 17).
		tauNew := tau / 8
		if tauNew < 2*tauFinal {
			tauNew = tauFinal
		}
		if valid {
			if !hessOK {
				hess(cur, tau, qd)
				hessOK = true
			}
			// Predictor: follow the path of optima mu(tau) to the new
			// temperature along its tangent, qd * dmu/dtau = dgrad/dtau.
			// Without it the first steps at a new temperature were cut
			// to slivers by the line search (the supply falls with the
			// log-sum-exp as tau shrinks): 64x1024 took 54 evaluations
			// of the dual, with it 23.
			if ar == nil {
				predictSoftmax(cur, dg)
			} else {
				predictArcs(cur, tau, dg)
			}
			tr := 0.0
			for a := range n {
				tr += qd[a*n+a]
			}
			avg := tr/float64(n) + 1e-12
			for a := range n {
				for b := a; b < n; b++ {
					q.SetSym(a, b, qd[a*n+b])
				}
				q.SetSym(a, a, qd[a*n+a]+damp*avg)
				rhs.SetVec(a, dg[a])
			}
			if chol.Factorize(q) && chol.SolveVecTo(&dir, rhs) == nil {
				for a := range n {
					mu[a] += (tauNew - tau) * dir.AtVec(a)
				}
			}
		}
		tau = tauNew
	}
	if s.debug != nil && ar == nil {
		s.debug("newton: %d steps, %d engine evals, %d softmax entries", steps, nEval, nEnts)
	}
	if s.debug != nil && ar != nil {
		s.debug("newton: %d steps, %d engine solves (%d engines)", steps, ar.calls, len(p.curves))
	}
	recoverFlows(mu, tau)
	return steps
}

// effRTT is the network latency the Newton phase prices edge e at. With
// churn, keeping previous traffic saves 2*churn_weight per rps relative
// to moving it (|x - prev| falls on one side and rises on the other), so
// edges that carried traffic get that discount; its capacity (prev rps)
// is left to the exact coordinate-descent phase.
func (s *solver) effRTT(e int32) float64 {
	if s.p.cw > 0 && s.p.prev[e] > 0 {
		return s.p.rtt[e] - 2*s.p.cw
	}
	return s.p.rtt[e]
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

func norm1(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += math.Abs(x)
	}
	return t
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
			dg[a] -= dL*ent*pu + lt*pu*(-lp-ent)
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
