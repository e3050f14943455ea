package optimizer

import (
	"math"
	"slices"
)

// arcs is the engine-major arc list of the smoothed dual with churn: each
// edge gives an uncapped arc priced rtt+churn and, when it carried
// traffic before, a second arc priced rtt-churn capped at the previous
// rps (keeping traffic where it was is cheaper by 2*churn per rps).
type arcs struct {
	start  []int32   // per engine
	pos    []int32   // active cluster position
	cost   []float64 // bid = mu[pos] - cost
	cap    []float64 // +Inf when uncapped
	logCap []float64
	edge   []int32
	// scratch
	x, bid []float64
	e      []float64 // uncapped arcs: exp((bid - best uncapped bid)/tau)
	idx    []int32
	calls  int // engine solves, for the trace
	// Capped arcs per engine (capStart) in the order of their last
	// breakpoints (capOrd, global arc indices), kept between evaluations
	// so that sorting is an insertion pass over a nearly sorted list.
	capStart, capOrd []int32
	tG               []float64 // breakpoint per capped arc
	local            []int32   // arc - start -> window position, or -1
	// enginePrice scratch
	ord                 []int32
	t, sufM, sufS, preC []float64
	knots               []float64
}

func (s *solver) buildArcs(pos []int) *arcs {
	p := s.p
	ar := &arcs{start: make([]int32, len(p.curves)+1)}
	// Count the arcs first: one allocation per slice (appending doubled
	// them, ~1 MB of garbage per 32x256 churn solve).
	na := 0
	for j := range p.curves {
		if p.usable[j] {
			for _, e := range s.byEngine[s.engStart[j]:s.engStart[j+1]] {
				if pos[s.edgeCluster[e]] >= 0 {
					na++
					if p.prev[e] > 0 {
						na++
					}
				}
			}
		}
	}
	ar.pos = make([]int32, 0, na)
	ar.cost = make([]float64, 0, na)
	ar.cap = make([]float64, 0, na)
	ar.logCap = make([]float64, 0, na)
	ar.edge = make([]int32, 0, na)
	for j := range p.curves {
		if p.usable[j] {
			for _, e := range s.byEngine[s.engStart[j]:s.engStart[j+1]] {
				a := pos[s.edgeCluster[e]]
				if a < 0 {
					continue
				}
				ar.pos = append(ar.pos, int32(a))
				ar.cost = append(ar.cost, p.rtt[e]+p.cw)
				ar.cap = append(ar.cap, math.Inf(1))
				ar.logCap = append(ar.logCap, math.Inf(1))
				ar.edge = append(ar.edge, e)
				if p.prev[e] > 0 {
					ar.pos = append(ar.pos, int32(a))
					ar.cost = append(ar.cost, p.rtt[e]-p.cw)
					ar.cap = append(ar.cap, p.prev[e])
					ar.logCap = append(ar.logCap, math.Log(p.prev[e]))
					ar.edge = append(ar.edge, e)
				}
			}
		}
		ar.start[j+1] = int32(len(ar.pos))
	}
	ar.capStart = make([]int32, len(p.curves)+1)
	maxArcs := 0
	for j := range p.curves {
		for a := ar.start[j]; a < ar.start[j+1]; a++ {
			if !math.IsInf(ar.cap[a], 1) {
				ar.capOrd = append(ar.capOrd, a)
			}
		}
		ar.capStart[j+1] = int32(len(ar.capOrd))
		maxArcs = max(maxArcs, int(ar.start[j+1]-ar.start[j]))
	}
	ar.tG = make([]float64, len(ar.pos))
	ar.local = make([]int32, maxArcs)
	return ar
}

// engine solves engine j's smoothed subproblem at prices mu: arc flows
// x_a = min(cap_a, exp((bid_a - m)/tau)) with the engine price m chosen
// so their sum equals the engine's supply at m. It leaves the significant
// arcs in ar.idx/ar.x and returns the engine's term Phi_j, the supply
// slope and m.
func (s *solver) engine(ar *arcs, j int, mu []float64, tau float64) (phi, dSupply, m float64) {
	p := s.p
	c := &p.curves[j]
	lo, hi := ar.start[j], ar.start[j+1]
	ar.calls++
	ar.idx, ar.bid, ar.x = ar.idx[:0], ar.bid[:0], ar.x[:0]
	// A free arc carries x = exp((bid - m)/tau) <= cap, so the engine
	// price m is at least the best uncapped bid - tau*log(cap): arcs
	// bidding more than tau*(45 + log(1+cap)) below that carry less
	// than exp(-45) rps and are left out.
	maxu := math.Inf(-1)
	for k := lo; k < hi; k++ {
		if math.IsInf(ar.cap[k], 1) {
			maxu = math.Max(maxu, mu[ar.pos[k]]-ar.cost[k])
		}
	}
	if math.IsInf(maxu, -1) || math.IsNaN(maxu) {
		return 0, 0, 0
	}
	floor := maxu - tau*(45+math.Log1p(c.cap))
	ar.t = resize(ar.t, int(hi-lo))
	for k := lo; k < hi; k++ {
		b := mu[ar.pos[k]] - ar.cost[k]
		if !math.IsInf(ar.cap[k], 1) {
			ar.tG[k] = b - tau*ar.logCap[k]
		}
		ar.local[k-lo] = -1
		if b >= floor {
			ar.local[k-lo] = int32(len(ar.idx))
			if !math.IsInf(ar.cap[k], 1) {
				ar.t[len(ar.idx)] = ar.tG[k]
			}
			ar.idx = append(ar.idx, k)
			ar.bid = append(ar.bid, b)
			ar.x = append(ar.x, 0)
		}
	}
	// Capped arcs by breakpoint descending (ties by arc index).
	co := ar.capOrd[ar.capStart[j]:ar.capStart[j+1]]
	sortByBreakpoint(co, ar.tG)
	ar.ord = ar.ord[:0]
	for _, a := range co {
		if k := ar.local[a-lo]; k >= 0 {
			ar.ord = append(ar.ord, k)
		}
	}
	m = s.enginePrice(ar, c, s.fullEngine[j], tau, maxu)
	phi, L := ar.flows(m, maxu, tau)
	phi -= c.g(math.Min(L, c.cap))
	if !s.fullEngine[j] {
		_, dSupply = c.inv(m)
	}
	return phi, dSupply, m
}

// flows sets the arc flows ar.x at engine price m and returns the arcs'
// entropy-smoothed revenue phi and their total flow L. Uncapped arcs
// carry x = e*exp((maxu - m)/tau) with e = exp((bid - maxu)/tau) from
// enginePrice. A free arc's entropy term is bid - tau*(log x - 1) =
// m + tau; a saturated one's uses log cap.
func (ar *arcs) flows(m, maxu, tau float64) (phi, L float64) {
	f := math.Exp(math.Min((maxu-m)/tau, 700))
	for k, b := range ar.bid {
		a := ar.idx[k]
		cp := ar.cap[a]
		var x float64
		switch {
		case math.IsInf(cp, 1):
			x = ar.e[k] * f
		case ar.t[k] >= m: // saturated
			x = cp
		default:
			x = math.Exp(math.Min((b-m)/tau, 700))
		}
		ar.x[k] = x
		switch {
		case x >= cp:
			ar.x[k] = cp
			L += cp
			phi += float64(cp * (b - float64(tau*(ar.logCap[a]-1))))
		case x > 0:
			L += x
			phi += float64(x * (m + tau))
		}
	}
	return phi, L
}

// enginePrice returns the root m of
//
//	h(m) = sum_a min(cap_a, exp((bid_a - m)/tau)) - L(m)
//
// for the arcs in ar.idx/ar.bid, where L is the engine's supply (c.inv,
// or c.cap when full). h is continuous and decreasing. Arc a is saturated
// exactly when m <= t_a = bid_a - tau*log(cap_a), so between consecutive
// breakpoints (the t_a and the knots of L) h is S*exp((M-m)/tau) + C -
// (alpha*m + beta) with the free arcs' log-sum-exp (S, M), the saturated
// caps C and L linear: the breakpoints are scanned from the top in
// sorted order (suffix sums, no cancellation) and the root in its
// interval is found from the scalar equation, so each arc costs one exp
// instead of one per iteration of a search.
func (s *solver) enginePrice(ar *arcs, c *curve, full bool, tau, maxu float64) float64 {
	ar.priceSums(c, full, tau, maxu)
	nk := len(ar.ord)
	supply := func(m float64) (float64, float64) {
		if full {
			return c.cap, 0
		}
		return c.inv(m)
	}
	// State q: the capped arcs at positions < q are saturated. h at the
	// breakpoint t_q of position q (state q) increases with q, so the
	// interval [t_q, t_{q-1}] holding the root is found by bisection over
	// q; within it only the supply's knots remain as breakpoints.
	tq := func(q int) float64 {
		if q >= nk {
			return math.Inf(-1)
		}
		return ar.t[ar.ord[q]]
	}
	hAt := func(q int, m float64) float64 {
		M, S, C := ar.sufM[q], ar.sufS[q], ar.preC[q]
		free := 0.0
		if S > 0 {
			free = S * math.Exp(math.Min((M-m)/tau, 700))
		}
		L, _ := supply(m)
		return free + C - L
	}
	lo, hi := 0, nk
	for lo < hi {
		mid := (lo + hi) / 2
		if hAt(mid, tq(mid)) >= 0 {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	q := lo
	lower, upper := tq(q), math.Inf(1)
	if q > 0 {
		upper = tq(q - 1)
	}
	M, S, C := ar.sufM[q], ar.sufS[q], ar.preC[q]
	for _, kv := range ar.knots { // descending
		if kv >= upper {
			continue
		}
		if kv <= lower {
			break
		}
		if hAt(q, kv) >= 0 {
			return solveInterval(kv, upper, M, S, C, tau, supply)
		}
		upper = kv
	}
	return solveInterval(lower, upper, M, S, C, tau, supply)
}

// priceSums prepares enginePrice's scan: capped arcs by t descending;
// the uncapped ones (t = -Inf) never saturate and enter as one
// log-sum-exp relative to maxu (the best uncapped bid), with each arc's
// term kept in ar.e. (engine leaves the capped arcs' positions sorted in
// ar.ord and their breakpoints in ar.t.) It fills the suffix log-sum-exps
// ar.sufM/sufS, the prefix caps ar.preC and the supply's knots ar.knots.
func (ar *arcs) priceSums(c *curve, full bool, tau, maxu float64) {
	ar.e = resize(ar.e, len(ar.bid))
	sU := 0.0
	for k, b := range ar.bid {
		if math.IsInf(ar.cap[ar.idx[k]], 1) {
			ar.e[k] = math.Exp((b - maxu) / tau)
			sU += ar.e[k]
		}
	}
	// Suffix log-sum-exp of the bids (free arcs at positions >= q, then
	// the uncapped ones) and prefix sums of the caps (saturated arcs
	// above q).
	nk := len(ar.ord)
	ar.sufM = resize(ar.sufM, nk+1)
	ar.sufS = resize(ar.sufS, nk+1)
	ar.preC = resize(ar.preC, nk+1)
	ar.preC[0] = 0
	ar.sufM[nk], ar.sufS[nk] = maxu, sU
	for q := nk - 1; q >= 0; q-- {
		b := ar.bid[ar.ord[q]]
		M, S := ar.sufM[q+1], ar.sufS[q+1]
		if b > M {
			S = float64(S*math.Exp((M-b)/tau)) + 1
			M = b
		} else {
			S += math.Exp((b - M) / tau)
		}
		ar.sufM[q], ar.sufS[q] = M, S
	}
	for q := range nk {
		ar.preC[q+1] = ar.preC[q] + ar.cap[ar.idx[ar.ord[q]]]
	}
	// Knots of the supply L(m), descending.
	ar.knots = ar.knots[:0]
	if !full {
		for k := len(c.s) - 1; k >= 0; k-- {
			ar.knots = append(ar.knots, c.v[k+1]+float64(c.l[k+1]*c.s[k]), c.v[k]+float64(c.l[k]*c.s[k]))
		}
	}
}

// solveInterval returns the root in [lo, hi] of S*exp((M-m)/tau) + C -
// L(m), L linear on the interval, decreasing, with h(lo) >= 0 > h(hi)
// (lo may be -Inf). It solves phi(m) = log S + (M-m)/tau - log(L(m) - C)
// = 0, convex and decreasing where L > C, by safeguarded Newton.
func solveInterval(lo, hi, M, S, C, tau float64, supply func(float64) (float64, float64)) float64 {
	mid := hi
	switch {
	case math.IsInf(lo, -1) && math.IsInf(hi, 1):
		mid = M
	case math.IsInf(lo, -1):
		mid = hi - 1
	case math.IsInf(hi, 1):
		mid = lo + 1
	default:
		mid = 0.5 * (lo + hi)
	}
	L0, alpha := supply(mid)
	beta := L0 - alpha*mid
	if S <= 0 {
		if alpha > 0 {
			return math.Min(math.Max((C-beta)/alpha, lo), hi)
		}
		return lo
	}
	if alpha == 0 {
		r := beta - C
		if r <= 0 {
			return hi
		}
		return math.Min(math.Max(M+float64(tau*(math.Log(S)-math.Log(r))), lo), hi)
	}
	// Domain of phi: m > mr.
	if mr := (C - beta) / alpha; mr > lo || math.IsInf(lo, -1) {
		lo = math.Max(lo, mr)
	}
	if math.IsInf(hi, 1) {
		// phi(m) -> -Inf; find a finite upper end.
		step := tau
		hi = math.Max(lo, M) + step
		for range 200 {
			if math.Log(S)+(M-hi)/tau-math.Log(float64(alpha*hi)+beta-C) < 0 {
				break
			}
			step *= 2
			hi += step
		}
	}
	return newtonInterval(lo, hi, M, S, C, alpha, beta, tau)
}

// newtonInterval is solveInterval's search with L(m) = alpha*m + beta
// (alpha > 0) and S > 0 on a finite bracket [lo, hi]: safeguarded Newton
// on phi, falling back to Newton on h from lo (or bisection) where a step
// leaves the bracket.
func newtonInterval(lo, hi, M, S, C, alpha, beta, tau float64) float64 {
	logS := math.Log(S)
	m := hi
	for range 200 {
		r := float64(alpha*m) + beta - C
		if !(r > 0) {
			m = 0.5 * (lo + hi)
			if hi-lo <= 1e-15*(1+math.Abs(m)) {
				break
			}
			lo = m
			continue
		}
		phi := logS + (M-m)/tau - math.Log(r)
		if phi >= 0 {
			lo = m
		} else {
			hi = m
		}
		if math.Abs(phi) <= 1e-15 || hi-lo <= 1e-15*(1+math.Abs(m)) {
			break
		}
		d := -1/tau - alpha/r
		next := m - phi/d
		if math.Abs(next-m) <= 1e-15*(1+math.Abs(m)) {
			// Newton converges monotonically from the left (phi is
			// convex), so the bracket's upper end stays put: stop when
			// the step is below float resolution instead of bisecting
			// the whole bracket again (that was ~20% of a churn solve).
			m = next
			break
		}
		if !(next > lo && next < hi) {
			next = 0.5 * (lo + hi)
			if !math.IsInf(lo, -1) {
				// Newton on h(m) = S*exp((M-m)/tau) - (alpha*m + beta
				// - C) from lo instead (h(lo) >= 0, h convex and
				// decreasing, so it stays in [lo, root]). Where the free
				// arcs carry next to nothing the root is within rounding
				// of the domain's end mr, phi < 0 on the whole bracket,
				// and bisecting down to it took ~50 iterations.
				fl := S * math.Exp(math.Min((M-lo)/tau, 700))
				nl := lo + (fl-(float64(alpha*lo)+beta-C))/(fl/tau+alpha)
				if nl >= lo && nl < hi {
					if nl-lo <= 1e-15*(1+math.Abs(lo)) {
						return nl
					}
					next = nl
				}
			}
		}
		m = next
	}
	return m
}

// resize returns v with length n, reusing its storage when it can.
func resize(v []float64, n int) []float64 {
	if cap(v) < n {
		return make([]float64, n, 2*n)
	}
	return v[:n]
}

// sortByBreakpoint sorts the arcs a by t[a] descending, ties by a
// ascending: an insertion pass (the order changes little between
// evaluations), or a full sort when that would move too much.
func sortByBreakpoint(a []int32, t []float64) {
	before := func(x, y int32) bool { return t[x] > t[y] || (t[x] == t[y] && x < y) }
	moves := 0
	for i := 1; i < len(a); i++ {
		v := a[i]
		tv := t[v]
		k := i
		for k > 0 {
			u := a[k-1]
			if tu := t[u]; !(tv > tu || (tv == tu && v < u)) {
				break
			}
			a[k] = u
			k--
		}
		a[k] = v
		if moves += i - k; moves > 8*len(a) {
			slices.SortFunc(a, func(x, y int32) int {
				switch {
				case before(x, y):
					return -1
				case before(y, x):
					return 1
				}
				return 0
			})
			return
		}
	}
}
