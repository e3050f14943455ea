package optimizer

import (
	"fmt"
	"math"
)

// Opt configures Solve.
type Opt interface{ apply(*config) }

type config struct {
	tol      float64
	maxIters int
	debug    func(string, ...any) // trace hook for internal tests
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// Tolerance sets the relative duality gap at which Solve stops.
// Default 1e-4 (0.01%).
func Tolerance(gap float64) Opt {
	return optionFunc(func(c *config) { c.tol = gap })
}

// MaxIterations bounds the number of coordinate-descent sweeps.
// Default 200.
func MaxIterations(n int) Opt {
	return optionFunc(func(c *config) { c.maxIters = n })
}

func (c *config) validate() error {
	if !(c.tol > 0) || math.IsInf(c.tol, 0) {
		return fmt.Errorf("%w: tolerance %v, want > 0", ErrInvalid, c.tol)
	}
	if c.maxIters < 1 {
		return fmt.Errorf("%w: max iterations %d, want >= 1", ErrInvalid, c.maxIters)
	}
	return nil
}

func nan() float64 { return math.NaN() }

// solver holds the working state of one Solve call.
type solver struct {
	p      *problem
	routed []float64
	x      []float64 // flow per edge (rps)
	load   []float64 // per engine
	mu     []float64 // cluster prices from coordinate descent (ms)
	dmu    []float64 // cluster prices of the dual bound (ms)
	pi     []float64 // engine prices (ms)
	piW    []float64 // scratch weights for pi

	fn           *flowNet
	fullEngine   []bool // full in every feasible plan
	tightCluster []bool // uses only such engines
	newtonSteps  int
	debug        func(string, ...any)
	tau0         float64
	bcdTol       float64 // relative accuracy of one cluster's solve
	approxChurn  bool    // Newton prices churn by effRTT instead of capped arcs

	// engine -> edges index, built on first use
	byEngine, engStart, edgeCluster []int32

	// scratch for one cluster
	xs, xlo, xhi, base []float64
}

// Solve computes the optimal routing weights for in. It returns an error
// wrapping ErrInvalid when in or an option is invalid.
//
// The max-flow start (fairRoute, spread) fixes how much of each cluster is
// routed; the smoothed dual Newton method then finds the optimum for all
// clusters at once; coordinate descent (with cycle cancelling) polishes,
// adds churn and certifies the gap.
func Solve(in *Instance, opts ...Opt) (*Solution, error) {
	cfg := config{tol: 1e-4, maxIters: 200}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p, err := problemOf(in)
	if err != nil {
		return nil, err
	}
	s := newSolver(p, cfg.debug)
	gap, best := s.newtonPhase(cfg.tol)
	gap, iters := s.descend(gap, best, cfg.tol, cfg.maxIters)
	return s.solution(gap, iters+s.newtonSteps), nil
}

// problemOf indexes in. The fast checks find any invalid input; Validate
// then names the field (the first in a deterministic order).
func problemOf(in *Instance) (*problem, error) {
	var p *problem
	ok := false
	if _, _, err := in.validateFields(false); err == nil {
		p, ok = newProblem(in)
	}
	if !ok {
		if err := in.Validate(); err != nil {
			return nil, err
		}
		return nil, invalid("instance rejected") // unreachable: Validate agrees
	}
	return p, nil
}

// newSolver routes as much of every cluster's demand as capacity allows
// (max-min fair shedding), spreads it over the cluster's engines and
// allocates the working state.
func newSolver(p *problem, debug func(string, ...any)) *solver {
	// Starting temperature of the smoothed dual (ms): coarse enough that
	// the first Newton steps from the spread start are not cut to a
	// sliver by the line search (with the predictor between stages, 8
	// takes 64x1024 in 19 evaluations of the dual, 4 in 23).
	s := &solver{p: p, tau0: 8, debug: debug}
	if p.cw > 0 {
		// The churn dual is flat along the prices of clusters whose
		// arcs all sit at their previous caps; a coarser start gives it
		// curvature for the first stage (on 26 churn instances at 8x64
		// and 32x256, tau0 16 took 22% fewer Newton steps than 8 and
		// 16% fewer than 32).
		s.tau0 = 16
	}
	s.routed, s.x, s.fn = fairRoute(p)
	s.fullEngine, s.tightCluster = s.fn.tight(p)
	s.load = make([]float64, len(p.curves))
	s.spread()
	s.mu = make([]float64, len(p.demand))
	for i := range s.mu {
		s.mu[i] = nan()
	}
	s.pi = make([]float64, len(p.curves))
	s.piW = make([]float64, len(p.curves))
	s.dmu = make([]float64, len(p.demand))
	maxDeg := 0
	for i := range p.demand {
		maxDeg = max(maxDeg, int(p.start[i+1]-p.start[i]))
	}
	s.xs = make([]float64, maxDeg)
	s.xlo = make([]float64, maxDeg)
	s.xhi = make([]float64, maxDeg)
	s.base = make([]float64, maxDeg)
	return s
}

// newtonPhase prices the spread start at its marginal costs, runs the
// smoothed dual Newton method from there and repairs its plan to a
// feasible one. It returns the plan's gap and the dual bound. It always
// runs: the start may be within tolerance without equal marginals.
func (s *solver) newtonPhase(tol float64) (gap, best float64) {
	p := s.p
	s.bcdTol = 1e-13
	s.initPrices()
	// Every dual value is a valid lower bound, so the best one seen is
	// kept (coordinate descent may move the prices to a weaker bound).
	// (The start's own bound is far below the one after Newton; only its
	// objective is needed, for the temperature scale.)
	primal, _ := s.primal()
	best = math.Inf(-1)
	mean := primal / math.Max(1e-9, sumOf(s.routed))
	if p.cw > 0 {
		// The churn arcs make the smoothed dual stiff at small
		// temperatures: a coarser final temperature (5x the one
		// before; Newton certifies the gap as it goes, and goes
		// lower when that falls short) and a step budget.
		s.newtonSteps = s.newton(math.Max(tol, 1e-3)*mean, tol, 60)
	} else {
		// Below about 1e-6 of the mean latency the softmax of the
		// smoothed dual is no longer resolved in float64 (Newton
		// stalls with an arbitrary residual); the exact phase takes
		// smaller tolerances from there.
		s.newtonSteps = s.newton(math.Max(0.2*tol, 1e-6)*mean, tol, 400)
	}
	s.fn.repair(p, s.routed, s.x)
	s.recomputeLoads()
	primal, dual := s.bounds()
	best = math.Max(best, dual)
	gap = relGap(primal, best)
	if s.debug != nil {
		s.debug("after newton: primal %.10g dual %.10g gap %.3g", primal, dual, gap)
	}
	if p.cw > 0 && gap > tol {
		s.bestChurnCandidate(tol, mean, primal)
		primal, dual = s.bounds()
		best = math.Max(best, dual)
		gap = relGap(primal, best)
	}
	return gap, best
}

// bestChurnCandidate is the fallback when the churn Newton run falls short
// of tol (its arcs make the smoothed dual stiff at small temperatures):
// it also tries the plan of the Newton run that prices churn
// approximately (previous edges 2*churn cheaper) and the previous plan
// itself, and keeps whichever of the three has the lowest objective
// (primal is the current plan's) for the exact phase.
func (s *solver) bestChurnCandidate(tol, mean, primal float64) {
	p := s.p
	keepX := append([]float64(nil), s.x...)
	keepMu := append([]float64(nil), s.mu...)
	bestPrimal := primal
	try := func(fill func()) {
		fill()
		s.fn.repair(p, s.routed, s.x)
		s.recomputeLoads()
		alt, _ := s.primal()
		if s.debug != nil {
			s.debug("candidate primal %.10g (best %.10g)", alt, bestPrimal)
		}
		if alt < bestPrimal {
			bestPrimal = alt
			copy(keepX, s.x)
			copy(keepMu, s.mu)
		}
	}
	try(func() {
		s.approxChurn = true
		s.tau0 = 8 // no capped arcs: the non-churn schedule
		s.initPrices()
		s.newtonSteps += s.newton(0.2*math.Max(tol, 1e-3)*mean, tol, 400)
		s.approxChurn = false
	})
	try(func() { copy(s.x, p.prev) })
	copy(s.x, keepX)
	copy(s.mu, keepMu)
	s.recomputeLoads()
}

// descend polishes the plan by coordinate descent over the clusters until
// the gap (against the best dual bound, best on entry) is within tol,
// exchanging capacity along negative cycles when it stalls. It returns
// the gap reached and the number of sweeps.
func (s *solver) descend(gap, best, tol float64, maxIters int) (float64, int) {
	p := s.p
	iters := 0
	prevPrimal := math.Inf(1)
	bestGap, bestAt := gap, iters
	for gap > tol && iters < maxIters {
		if iters-bestAt >= 10 {
			break // no real progress for 10 sweeps: report the gap reached
		}
		iters++
		for i := range p.demand {
			s.solveCluster(i)
		}
		primal, dual := s.bounds()
		best = math.Max(best, dual)
		gap = relGap(primal, best)
		if s.debug != nil {
			s.debug("sweep %d: primal %.10g dual %.10g gap %.3g", iters, primal, dual, gap)
		}
		if gap <= tol {
			break
		}
		if gap < 0.95*bestGap {
			bestGap, bestAt = gap, iters
		}
		if prevPrimal-primal <= 0.1*(primal-best) {
			// Coordinate descent is stalling: exchange capacity between
			// clusters along negative cycles.
			if !s.cancelCycles(8) && prevPrimal-primal <= 1e-12*math.Abs(primal) {
				break
			}
		}
		prevPrimal = primal
	}
	return gap, iters
}

// cancelCycles cancels up to n negative cycles and reports whether it
// found any.
func (s *solver) cancelCycles(n int) bool {
	found := false
	for range n {
		if !s.cancelCycle() {
			break
		}
		found = true
	}
	return found
}

// spread moves the max-flow start towards spreading each cluster's
// routed demand over its engines in proportion to capacity (an interior
// point, so coordinate descent does not start against capacity walls),
// as far as capacities allow, and recomputes the loads.
func (s *solver) spread() {
	p := s.p
	prop := make([]float64, len(s.x))
	pload := make([]float64, len(p.curves))
	for i := range p.demand {
		tot := 0.0
		for e := p.start[i]; e < p.start[i+1]; e++ {
			tot += p.curves[p.eng[e]].cap
		}
		if tot <= 0 {
			continue
		}
		for e := p.start[i]; e < p.start[i+1]; e++ {
			prop[e] = s.routed[i] * p.curves[p.eng[e]].cap / tot
			pload[p.eng[e]] += prop[e]
		}
	}
	for e, v := range s.x {
		s.load[p.eng[e]] += v
	}
	// Largest theta with theta*prop + (1-theta)*x within capacity.
	theta := 1.0
	for j, c := range p.curves {
		if d := pload[j] - s.load[j]; d > 0 {
			theta = math.Min(theta, (c.cap-s.load[j])/d)
		}
	}
	theta = math.Max(0, theta) * (1 - 1e-9)
	for j := range s.load {
		s.load[j] = 0
	}
	for e := range s.x {
		s.x[e] += float64(theta * (prop[e] - s.x[e]))
		s.load[p.eng[e]] += s.x[e]
	}
}

func relGap(primal, dual float64) float64 {
	g := primal - dual
	if g <= 0 {
		return 0
	}
	den := math.Max(math.Abs(primal), 1e-9)
	return g / den
}

// respond is engine j's best response on edge e to cluster price mu when
// the other clusters put load b on it: the flow x and dx/dmu.
func (s *solver) respond(e int, b, mu float64) (float64, float64) {
	p := s.p
	c := &p.curves[p.eng[e]]
	ub := math.Max(0, c.cap-b)
	r, prev, cw := p.rtt[e], p.prev[e], p.cw
	clip := func(l, d float64) (float64, float64) {
		x := l - b
		if x <= 0 {
			return 0, 0
		}
		if x >= ub {
			return ub, 0
		}
		return x, d
	}
	a, da := clip(c.inv(mu - r + cw))
	if cw == 0 || a < prev {
		return a, da
	}
	bb, db := clip(c.inv(mu - r - cw))
	if bb > prev {
		return bb, db
	}
	return math.Min(prev, ub), 0
}

// eval fills s.xs with the responses of cluster i's edges at price mu.
func (s *solver) eval(i int, mu float64) (sum, slope float64) {
	p := s.p
	lo := int(p.start[i])
	for k := range int(p.start[i+1]) - lo {
		x, d := s.respond(lo+k, s.base[k], mu)
		s.xs[k] = x
		sum += x
		slope += d
	}
	return sum, slope
}

// solveCluster re-optimises cluster i's flows with the other clusters'
// flows fixed (marginal-cost equalisation).
func (s *solver) solveCluster(i int) {
	p := s.p
	lo, hi := int(p.start[i]), int(p.start[i+1])
	n := hi - lo
	R := s.routed[i]
	if n == 0 || R <= 0 {
		return
	}
	muLo, muHi, sHi := s.clusterBracket(i)
	if sHi <= R {
		s.fillCluster(i, R, sHi, muHi)
		return
	}
	mu := s.mu[i]
	if !(mu > muLo && mu < muHi) {
		mu = 0.5 * (muLo + muHi)
	}
	mu = s.searchPrice(i, R, mu, muLo, muHi, sHi)
	// Fix the last rounding residual within the bounds.
	sum := 0.0
	for k := range n {
		sum += s.xs[k]
	}
	for k := 0; k < n && sum != R; k++ {
		ub := math.Max(0, p.curves[p.eng[lo+k]].cap-s.base[k])
		d := math.Max(-s.xs[k], math.Min(ub-s.xs[k], R-sum))
		s.xs[k] += d
		sum += d
	}
	s.mu[i] = mu
	for k := range n {
		e := lo + k
		j := p.eng[e]
		s.load[j] = s.base[k] + s.xs[k]
		s.x[e] = s.xs[k]
	}
}

// clusterBracket sets, per edge of cluster i, the other clusters' load
// on its engine (s.base) and the flow bounds (s.xlo = 0, s.xhi = the
// engine's room), and returns a price bracket [muLo, muHi] and the total
// room sHi.
func (s *solver) clusterBracket(i int) (muLo, muHi, sHi float64) {
	p := s.p
	lo, hi := int(p.start[i]), int(p.start[i+1])
	n := hi - lo
	muLo, muHi = math.Inf(1), math.Inf(-1)
	for k := range n {
		e := lo + k
		j := p.eng[e]
		b := s.load[j] - s.x[e]
		s.base[k] = b
		c := &p.curves[j]
		if b < c.cap {
			muLo = math.Min(muLo, p.rtt[e]-p.cw+c.dRight(b))
		}
		muHi = math.Max(muHi, p.rtt[e]+p.cw+c.dLeft(c.cap))
		s.xlo[k] = 0
		s.xhi[k] = math.Max(0, c.cap-b)
	}
	for k := range n {
		sHi += s.xhi[k]
	}
	return muLo, muHi, sHi
}

// fillCluster handles a cluster whose engines have no more room than its
// routed amount R (R == sHi up to rounding): it takes all of it.
func (s *solver) fillCluster(i int, R, sHi, muHi float64) {
	p := s.p
	lo, hi := int(p.start[i]), int(p.start[i+1])
	if sHi < R*(1-1e-9) {
		return // cannot happen for a feasible start; keep the old flows
	}
	if math.IsNaN(s.mu[i]) {
		s.mu[i] = muHi
	}
	for k := range hi - lo {
		e := lo + k
		s.x[e] = s.xhi[k]
		s.load[p.eng[e]] = s.base[k] + s.xhi[k]
	}
}

// searchPrice finds the price at which cluster i's best responses (left
// in s.xs) sum to R, by safeguarded Newton steps within the bracket
// [muLo, muHi] (bisecting when a step leaves it or the bracket shrinks
// too slowly); when the bracket closes first, it interpolates between
// the responses at its ends.
func (s *solver) searchPrice(i int, R, mu, muLo, muHi, sHi float64) float64 {
	n := int(s.p.start[i+1] - s.p.start[i])
	sLo := 0.0
	tolAbs := s.bcdTol * (R + 1)
	lastWidth := muHi - muLo
	for it := 0; it < 200; it++ {
		sum, slope := s.eval(i, mu)
		if math.Abs(sum-R) <= tolAbs {
			return mu
		}
		if sum < R {
			muLo, sLo = mu, sum
			copy(s.xlo[:n], s.xs[:n])
		} else {
			muHi, sHi = mu, sum
			copy(s.xhi[:n], s.xs[:n])
		}
		width := muHi - muLo
		if width <= s.bcdTol*(math.Abs(muLo)+math.Abs(muHi)+1) {
			break
		}
		next := math.NaN()
		if slope > 0 {
			next = mu + (R-sum)/slope
		}
		if !(next > muLo && next < muHi) || (it%3 == 2 && width > 0.5*lastWidth) {
			next = 0.5 * (muLo + muHi)
		}
		if it%3 == 2 {
			lastWidth = width
		}
		mu = next
	}
	// Interpolate between the bracket ends: both are best responses
	// at (nearly) the same price.
	t := 0.0
	if sHi > sLo {
		t = (R - sLo) / (sHi - sLo)
	}
	for k := range n {
		s.xs[k] = s.xlo[k] + float64(t*(s.xhi[k]-s.xlo[k]))
	}
	return muLo + float64(t*(muHi-muLo))
}

func sumOf(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t
}

func (s *solver) recomputeLoads() {
	for j := range s.load {
		s.load[j] = 0
	}
	for e, x := range s.x {
		s.load[s.p.eng[e]] += x
	}
}

// initPrices sets each cluster's price to the flow-weighted marginal
// end-to-end latency of its current (spread) flows.
func (s *solver) initPrices() {
	p := s.p
	for i := range p.demand {
		num, den := 0.0, 0.0
		for e := p.start[i]; e < p.start[i+1]; e++ {
			j := p.eng[e]
			c := &p.curves[j]
			num += float64(s.x[e] * (p.rtt[e] + c.dRight(math.Min(s.load[j], c.cap*(1-1e-9)))))
			den += s.x[e]
		}
		if den > 0 {
			s.mu[i] = num / den
		}
	}
}
