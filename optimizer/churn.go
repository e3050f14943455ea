package optimizer

import "math"

// arcs is the engine-major arc list of the smoothed dual with churn: each
// edge gives an uncapped arc priced rtt+churn and, when it carried
// traffic before, a second arc priced rtt-churn capped at the previous
// rps (keeping traffic where it was is cheaper by 2*churn per rps).
type arcs struct {
	start []int32   // per engine
	pos   []int32   // active cluster position
	cost  []float64 // bid = mu[pos] - cost
	cap   []float64 // +Inf when uncapped
	edge  []int32
	// scratch
	x, bid []float64
	idx    []int32
	mEng   []float64
}

func (s *solver) buildArcs(pos []int) *arcs {
	p := s.p
	ar := &arcs{start: make([]int32, len(p.curves)+1), mEng: make([]float64, len(p.curves))}
	for j := range p.curves {
		ar.mEng[j] = math.NaN()
		if p.usable[j] {
			for _, e := range s.byEngine[s.engStart[j]:s.engStart[j+1]] {
				a := pos[s.edgeCluster[e]]
				if a < 0 {
					continue
				}
				ar.pos = append(ar.pos, int32(a))
				ar.cost = append(ar.cost, p.rtt[e]+p.cw)
				ar.cap = append(ar.cap, math.Inf(1))
				ar.edge = append(ar.edge, e)
				if p.prev[e] > 0 {
					ar.pos = append(ar.pos, int32(a))
					ar.cost = append(ar.cost, p.rtt[e]-p.cw)
					ar.cap = append(ar.cap, p.prev[e])
					ar.edge = append(ar.edge, e)
				}
			}
		}
		ar.start[j+1] = int32(len(ar.pos))
	}
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
	ar.idx, ar.bid, ar.x = ar.idx[:0], ar.bid[:0], ar.x[:0]
	maxb := math.Inf(-1)
	for k := lo; k < hi; k++ {
		maxb = math.Max(maxb, mu[ar.pos[k]]-ar.cost[k])
	}
	if math.IsInf(maxb, -1) {
		return 0, 0, 0
	}
	// Capped arcs bid 2*churn above their uncapped twins; the window must
	// keep the best uncapped arcs, which carry any flow beyond the caps.
	window := tau*(45+math.Log1p(c.cap)) + 2*p.cw
	for k := lo; k < hi; k++ {
		if b := mu[ar.pos[k]] - ar.cost[k]; b >= maxb-window {
			ar.idx = append(ar.idx, k)
			ar.bid = append(ar.bid, b)
			ar.x = append(ar.x, 0)
		}
	}
	full := s.fullEngine[j]
	supply := func(m float64) (float64, float64) {
		if full {
			return c.cap, 0
		}
		return c.inv(m)
	}
	// h(m) = sum of arc flows - supply(m) is decreasing in m.
	h := func(m float64) (float64, float64) {
		sum, free := 0.0, 0.0
		for k, b := range ar.bid {
			z := math.Min((b-m)/tau, 700)
			x := math.Exp(z)
			if cp := ar.cap[ar.idx[k]]; x >= cp {
				x = cp
			} else {
				free += x
			}
			ar.x[k] = x
			sum += x
		}
		sup, ds := supply(m)
		return sum - sup, -free/tau - ds
	}
	m = ar.mEng[j]
	if math.IsNaN(m) {
		m = maxb
	}
	// Bracket the root by doubling steps, then safeguarded Newton.
	mLo, mHi := math.Inf(-1), math.Inf(1)
	step := tau
	for range 200 {
		v, _ := h(m)
		if v > 0 {
			mLo = m
			if !math.IsInf(mHi, 1) {
				break
			}
			m += step
		} else {
			mHi = m
			if !math.IsInf(mLo, -1) {
				break
			}
			m -= step
		}
		step *= 2
	}
	m = 0.5 * (mLo + mHi)
	lastWidth := mHi - mLo
	for it := range 200 {
		v, d := h(m)
		if v > 0 {
			mLo = m
		} else {
			mHi = m
		}
		width := mHi - mLo
		if math.Abs(v) <= 1e-12*(1+c.cap) || width <= 1e-13*(1+math.Abs(m)) {
			break
		}
		next := m - v/d
		// Newton crawls (by tau per step) where the exponentials
		// dominate; bisect unless the bracket halves every two steps.
		if !(next > mLo && next < mHi) || (it%2 == 1 && width > 0.5*lastWidth) {
			next = 0.5 * (mLo + mHi)
		}
		if it%2 == 1 {
			lastWidth = width
		}
		m = next
	}
	h(m)
	ar.mEng[j] = m
	L := 0.0
	for k, x := range ar.x {
		L += x
		if x > 0 {
			phi += x * (ar.bid[k] - tau*(math.Log(x)-1))
		}
	}
	phi -= c.g(math.Min(L, c.cap))
	_, dSupply = supply(m)
	return phi, dSupply, m
}
