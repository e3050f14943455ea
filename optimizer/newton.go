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
// tauFinal. Each Newton step solves an nc×nc system (gonum Cholesky).
// With churn (and without s.approxChurn) the engines see capped arcs
// instead (see arcs and newtonState.eval); otherwise churn is priced by
// effRTT and left to the coordinate-descent polish. It leaves the
// recovered flows in s.x and the prices in s.mu, and returns the number
// of Newton steps taken.
func (s *solver) newton(tauFinal, tol float64, maxSteps int) int {
	if s.byEngine == nil {
		s.indexEngines()
	}
	act, pos := s.activeClusters()
	if len(act) == 0 {
		return 0
	}
	// On any numerical failure the flows and prices are restored, so the
	// exact phase starts from the (feasible) plan it had.
	defer s.restoreIfNonFinite(append([]float64(nil), s.x...), append([]float64(nil), s.mu...))
	nt := s.newNewton(act, pos)
	return nt.run(tauFinal, tol, maxSteps)
}

// activeClusters lists the clusters with routed demand and at least one
// edge (act, by position) and maps every cluster to its position or -1
// (pos). Active clusters without a price get the highest marginal cost
// of their edges at the current loads.
func (s *solver) activeClusters() (act, pos []int) {
	p := s.p
	pos = make([]int, len(p.demand))
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
	return act, pos
}

// restoreIfNonFinite puts back the flows x and prices mu when the Newton
// phase left a NaN or infinite flow or an infinite price.
func (s *solver) restoreIfNonFinite(x, mu []float64) {
	for _, v := range s.x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			copy(s.x, x)
			copy(s.mu, mu)
			return
		}
	}
	for _, v := range s.mu {
		if math.IsInf(v, 0) {
			copy(s.x, x)
			copy(s.mu, mu)
			return
		}
	}
}

// newtonState is the working state of one newton call.
type newtonState struct {
	s   *solver
	p   *problem
	act []int // active clusters by position
	pos []int // cluster -> position in act, or -1
	n   int   // len(act)

	// Engine-major copy of the active edges: positions and rtts (effRTT).
	eStart, ePos []int32
	eRTT         []float64
	// Churn arcs (nil without churn or with s.approxChurn) and the
	// per-cluster scratch of their evaluation and Hessian.
	ar             *arcs
	sAcc, sLog, sv []float64
	cut            float64 // softmax entries below exp(cut) are dropped
	nEval, nEnts   int     // softmax engine evaluations and entries, for the trace
	total          float64 // routed demand of the active clusters
	steps          int
	mu, trial, dg  []float64
	cur, next      *hessTerms // evaluations at mu and at the trial point
	qd             []float64  // Hessian (upper triangle) at cur
	hessOK         bool       // qd is the Hessian at cur
	damp, radius   float64    // Levenberg–Marquardt damping, step radius
	probe, stalled bool       // first stage watched for a stall (hotStart)
	q              *mat.SymDense
	chol           mat.Cholesky
	rhs            *mat.VecDense
	dir            mat.VecDense
}

// newNewton builds the state for the active clusters act (positions pos),
// starting from the prices in s.mu.
func (s *solver) newNewton(act, pos []int) *newtonState {
	p := s.p
	n := len(act)
	nt := &newtonState{
		s: s, p: p, act: act, pos: pos, n: n,
		qd:    make([]float64, n*n),
		mu:    make([]float64, n),
		trial: make([]float64, n),
		dg:    make([]float64, n),
		q:     mat.NewSymDense(n, nil),
		rhs:   mat.NewVecDense(n, nil),
		cut:   -30,
		damp:  1e-10,
		cur:   newHessTerms(n),
		next:  newHessTerms(n),
	}
	nt.indexEdges()
	nt.startPrices()
	for _, i := range act {
		nt.total += s.routed[i]
	}
	if p.cw > 0 && !s.approxChurn {
		nt.ar = s.buildArcs(pos)
		for _, h := range []*hessTerms{nt.cur, nt.next} {
			// An evaluation lists at most every arc once.
			h.ents = make([]int32, 0, len(nt.ar.pos))
			h.vals = make([]float64, 0, len(nt.ar.pos))
			h.ext = make([]float64, 0, len(nt.ar.pos))
			h.off = append(make([]int32, 0, len(p.curves)+1), 0)
			h.a = make([]float64, 0, len(p.curves))
			h.b = make([]float64, 0, len(p.curves))
		}
		nt.sAcc = make([]float64, n)
		nt.sLog = make([]float64, n)
	}
	return nt
}

// indexEdges builds the engine-major copy of the active edges.
func (nt *newtonState) indexEdges() {
	s, p := nt.s, nt.p
	nt.eStart = make([]int32, len(p.curves)+1)
	nt.ePos = make([]int32, 0, len(s.x))
	nt.eRTT = make([]float64, 0, len(s.x))
	for j := range p.curves {
		if p.usable[j] {
			for _, e := range s.byEngine[s.engStart[j]:s.engStart[j+1]] {
				if a := nt.pos[s.edgeCluster[e]]; a >= 0 {
					nt.ePos = append(nt.ePos, int32(a))
					nt.eRTT = append(nt.eRTT, s.effRTT(e))
				}
			}
		}
		nt.eStart[j+1] = int32(len(nt.ePos))
	}
}

// startPrices copies the active clusters' prices into nt.mu. Clusters that
// only use always-full engines compete for fixed capacity; only their
// price differences matter, and coordinate descent leaves them far apart,
// so they start level.
func (nt *newtonState) startPrices() {
	s := nt.s
	level, nl := 0.0, 0
	for a, i := range nt.act {
		nt.mu[a] = s.mu[i]
		if s.tightCluster[i] {
			level += nt.mu[a]
			nl++
		}
	}
	if nl > 0 {
		level /= float64(nl)
		for a, i := range nt.act {
			if s.tightCluster[i] {
				nt.mu[a] = level
			}
		}
	}
}

// run drives the temperature schedule: start wide (spread of network
// latencies), shrink 8x per stage down to tauFinal, with a predictor step
// between stages. It returns the number of Newton steps.
func (nt *newtonState) run(tauFinal, tol float64, maxSteps int) int {
	s := nt.s
	tau := math.Max(tauFinal, s.tau0)
	extra := 0
	var start []float64 // prices to restart from (see hotStart)
	if tau > tauFinal {
		start = append([]float64(nil), nt.mu...)
		nt.probe = true
	}
	for {
		final := tau <= tauFinal
		valid, certified := nt.stage(tau, final, tol, maxSteps)
		if certified {
			return nt.steps
		}
		if nt.probe {
			nt.probe = false
			if nt.stalled {
				tau = nt.hotStart(start, tau, tauFinal)
				continue
			}
		}
		if s.debug != nil {
			nt.eval(nt.mu, tau, nt.next)
			s.debug("tau %.4g steps %d grad1 %.4g total %.4g", tau, nt.steps, norm1(nt.next.grad), nt.total)
		}
		if final && nt.ar != nil && extra < 2 && nt.steps < maxSteps {
			// Churn: the final temperature is coarse (the gap is
			// certified on the way, see stage); when that falls short,
			// go on at an 8x lower temperature, twice at most.
			extra++
			tauFinal = tau / 8
		} else if final || nt.steps >= maxSteps {
			break
		}
		// With the predictor the temperature can drop 8x per stage
		// (4x: 64x1024 took 19 evaluations of the dual, 8x: 17).
		tauNew := tau / 8
		if tauNew < 2*tauFinal {
			tauNew = tauFinal
		}
		if valid {
			nt.predict(tau, tauNew)
		}
		tau = tauNew
	}
	if s.debug != nil && nt.ar == nil {
		s.debug("newton: %d steps, %d engine evals, %d softmax entries", nt.steps, nt.nEval, nt.nEnts)
	}
	if s.debug != nil && nt.ar != nil {
		s.debug("newton: %d steps, %d engine solves (%d engines)", nt.steps, nt.ar.calls, len(nt.p.curves))
	}
	nt.recoverFlows(tau)
	return nt.steps
}

// stage takes Newton steps at temperature tau until the gradient is small
// enough, the steps stall or the budget is spent. It reports whether cur
// holds an evaluation at mu (valid) and whether the churn plan was
// certified within tol (certified: the flows are recovered and newton is
// done).
func (nt *newtonState) stage(tau float64, final bool, tol float64, maxSteps int) (valid, certified bool) {
	want := 1e-2 * nt.total
	if final {
		want = math.Min(1e-2*tol, 1e-7) * nt.total
	}
	nt.cut = -10 // exp(-10) ~ 5e-5 in the coarse stages
	if final {
		nt.cut = -30 // exp(-30) ~ 1e-13 in the final one
	}
	var f float64
	nt.radius = math.Inf(1)
	if nt.ar != nil {
		// Churn: the first step of a stage is limited to a price
		// move of 8 temperatures (the Newton direction can be huge
		// along flat cluster prices, and backtracking from the full
		// step took several evaluations of the dual; ~12% fewer
		// engine solves on the churn instances).
		nt.radius = 8 * tau
	}
	nt.hessOK = false
	bestG1, stall := math.Inf(1), 0
	checkAt := 2 * tol * nt.total
	g1First := math.NaN()
	for it := 0; it < 60 && nt.steps < maxSteps; it++ {
		if !valid {
			f = nt.eval(nt.mu, tau, nt.cur)
			nt.hessOK = false
			valid = true
		}
		g1 := norm1(nt.cur.grad)
		if it == 0 {
			g1First = g1
		}
		if nt.probe && it == probeSteps && nt.stalledAt(g1, g1First) {
			nt.stalled = true // see hotStart
			return valid, false
		}
		if final && nt.ar != nil && g1 <= checkAt {
			// Churn: the final temperature's gradient target is
			// far stricter than the gap needs (the relative gap
			// measured 0.3-8 times g1/total here, reached 10-30
			// steps before the target), so the plan is certified
			// from g1 = 2*tol*total on, again each time g1 halves,
			// and Newton stops as soon as the gap is within tol.
			if nt.certify(g1, tau, tol) {
				return valid, true
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
		} else if stall++; stall >= 3 && g1 <= 1e-5*nt.total {
			break
		}
		nt.steps++
		var ok bool
		if f, ok = nt.step(f, g1, tau); !ok {
			break
		}
	}
	return valid, false
}

// certify recovers and repairs the plan at mu and reports whether its
// duality gap is within tol.
func (nt *newtonState) certify(g1, tau, tol float64) bool {
	s := nt.s
	nt.recoverFlows(tau)
	s.fn.repair(nt.p, s.routed, s.x)
	s.recomputeLoads()
	pr, du := s.bounds()
	gap := relGap(pr, du)
	if s.debug != nil {
		s.debug("   certify g1 %.3g gap %.3g calls %d", g1, gap, nt.ar.calls)
	}
	return gap <= tol
}

// step takes one damped Newton step from mu, where the dual is f and the
// gradient's 1-norm g1, raising the damping until the line search finds
// an improvement (8 tries). It returns the dual at the new mu and false
// when no step improved it.
func (nt *newtonState) step(f, g1, tau float64) (float64, bool) {
	s := nt.s
	if !nt.hessOK { // assembled only where a step is taken from
		nt.hess(nt.cur, tau)
		nt.hessOK = true
	}
	grad := nt.cur.grad
	avg := nt.avgDiag()
	improved, roundoff := false, false
	for try := 0; try < 8 && !improved && !roundoff; try++ {
		if !nt.solveDamped(grad, avg, tau) {
			nt.damp *= 100
			continue
		}
		var alpha float64
		f, alpha, improved, roundoff = nt.lineSearch(f, g1, tau, grad)
		if s.debug != nil {
			dmax := nt.dirMax()
			s.debug("  step tau %.3g try %d alpha %g improved %v g1 %.3g damp %g dmax %.4g step %.4g evals %d", tau, try, alpha, improved, g1, nt.damp, dmax, alpha*dmax, nt.nEval)
		}
		if !improved {
			nt.damp = math.Max(nt.damp*100, 1e-6)
		} else if alpha == 1 {
			nt.damp = math.Max(nt.damp/10, 1e-12)
		}
	}
	if roundoff && !improved {
		return f, false
	}
	if !improved {
		if s.debug != nil {
			s.debug("step failed: f %v g1 %v damp %v", f, g1, nt.damp)
		}
		return f, false
	}
	copy(nt.mu, nt.trial)
	return f, true
}

// avgDiag is the mean diagonal of the Hessian qd (plus 1e-12), the scale
// of the damping.
func (nt *newtonState) avgDiag() float64 {
	n := nt.n
	tr := 0.0
	for a := range n {
		tr += nt.qd[a*n+a]
	}
	return tr/float64(n) + 1e-12
}

// solveDamped solves (qd + damp*avg*I) dir = b (Levenberg–Marquardt) and
// reports whether the factorization and solve succeeded. With churn and
// trustTau > 0 the diagonal is also at least |b_a|/(16*trustTau).
func (nt *newtonState) solveDamped(b []float64, avg, trustTau float64) bool {
	n, qd := nt.n, nt.qd
	for a := range n {
		for c := a; c < n; c++ {
			nt.q.SetSym(a, c, qd[a*n+c])
		}
		d := qd[a*n+a] + nt.damp*avg
		if nt.ar != nil && trustTau > 0 {
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
			d = math.Max(d, math.Abs(b[a])/(16*trustTau))
		}
		nt.q.SetSym(a, a, d)
		nt.rhs.SetVec(a, b[a])
	}
	return nt.chol.Factorize(nt.q) && nt.chol.SolveVecTo(&nt.dir, nt.rhs) == nil
}

func (nt *newtonState) dirMax() float64 {
	dmax := 0.0
	for a := range nt.n {
		dmax = math.Max(dmax, math.Abs(nt.dir.AtVec(a)))
	}
	return dmax
}

// lineSearch backtracks along dir from mu (dual f, gradient grad with
// 1-norm g1). On success it leaves the accepted point in trial and its
// evaluation in cur. It returns the dual reached, the last step length
// tried, whether a step was accepted and whether the search stopped at
// the resolution of f (roundoff).
func (nt *newtonState) lineSearch(f, g1, tau float64, grad []float64) (fNew, alpha float64, improved, roundoff bool) {
	n, dir := nt.n, &nt.dir
	dmax := nt.dirMax()
	slope := 0.0
	for a := range n {
		slope += grad[a] * dir.AtVec(a)
	}
	alpha = 1.0
	if dmax > 0 {
		alpha = math.Min(1, nt.radius/dmax)
	}
	alpha0 := alpha
	for range 12 {
		// When the gain is below the resolution of f, only the
		// full Newton step is tried, and it is judged by the
		// gradient: accepted when that halves (the flows then
		// need no max-flow repair worth the name), otherwise
		// the prices are as good as floating point allows.
		tiny := alpha*slope <= 1e-13*math.Abs(f) && g1 <= 1e-6*nt.total
		if tiny && alpha < 1 {
			return f, alpha, false, true
		}
		for a := range n {
			nt.trial[a] = nt.mu[a] + alpha*dir.AtVec(a)
		}
		ft := nt.eval(nt.trial, tau, nt.next)
		if ft >= f+float64(1e-4*alpha*slope) || (tiny && norm1(nt.next.grad) < 0.5*g1) {
			// Step radius (largest price move tried first): twice
			// the last backtracked step, eight times larger after
			// a step taken whole. Ill-conditioned duals (sparse
			// residency near capacity) then waste far fewer
			// evaluations (12x80 residency: 45880 -> 7474
			// engine evaluations); the benchmark fleets hardly
			// backtrack at all.
			if alpha == alpha0 {
				nt.radius *= 8
			} else {
				nt.radius = 2 * alpha * dmax
			}
			nt.cur, nt.next = nt.next, nt.cur
			nt.hessOK = false
			return ft, alpha, true, false
		}
		if tiny {
			return f, alpha, false, true
		}
		// Without churn, backtrack to the maximiser of the
		// quadratic through f, the slope and ft, kept within
		// [alpha/16, alpha/2]; the stiff churn dual does better
		// with plain quartering (measured: 64x1024 churn 500
		// 405 ms quartering, 517 ms interpolating).
		next := alpha / 4
		if c := (ft - f - slope*alpha) / (alpha * alpha); nt.ar == nil && c < 0 && !math.IsNaN(ft) {
			next = -slope / (2 * c)
		}
		alpha = math.Max(alpha/16, math.Min(alpha/2, next))
	}
	return f, alpha, false, false
}

// predict moves mu from the optimum at tau towards the one at tauNew along
// the path's tangent, qd * dmu/dtau = dgrad/dtau. Without it the first
// steps at a new temperature were cut to slivers by the line search (the
// supply falls with the log-sum-exp as tau shrinks): 64x1024 took 54
// evaluations of the dual, with it 23.
func (nt *newtonState) predict(tau, tauNew float64) {
	if !nt.hessOK {
		nt.hess(nt.cur, tau)
		nt.hessOK = true
	}
	if nt.ar == nil {
		predictSoftmax(nt.cur, nt.dg)
	} else {
		predictArcs(nt.cur, tau, nt.dg)
	}
	if nt.solveDamped(nt.dg, nt.avgDiag(), 0) {
		for a := range nt.n {
			nt.mu[a] += (tauNew - tau) * nt.dir.AtVec(a)
		}
	}
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

func norm1(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += math.Abs(x)
	}
	return t
}
