package optimizer

import "math"

// curve is an engine's latency model in load units (rps) on [0, cap]:
// f(L) is piecewise linear with knots l[k], values v[k] and segment
// slopes s[k]; g(L) = L f(L) is the engine's latency rate and g'(L) its
// marginal latency.
type curve struct {
	l, v, s []float64
	cap     float64
}

// newCurve builds the curve of profile pts for an engine of capacity c
// (rps) capped at utilization maxU. pts must be valid (validateProfile).
func newCurve(pts [][2]float64, c, maxU float64) curve {
	cp := c * maxU
	var cv curve
	cv.cap = cp
	// Latency as a function of utilization, extended flat to the left
	// and along the last segment to the right.
	at := func(u float64) float64 {
		if u <= pts[0][0] || len(pts) == 1 {
			return pts[0][1]
		}
		for k := 1; k < len(pts); k++ {
			if u <= pts[k][0] || k == len(pts)-1 {
				a, b := pts[k-1], pts[k]
				return a[1] + (b[1]-a[1])*(u-a[0])/(b[0]-a[0])
			}
		}
		return pts[len(pts)-1][1]
	}
	// Knots at 0, the profile's points inside (0, maxU), and maxU; l, v
	// and s share one allocation.
	nu := 2
	for _, p := range pts {
		if p[0] > 0 && p[0] < maxU {
			nu++
		}
	}
	buf := make([]float64, 3*nu-1)
	cv.l, cv.v, cv.s = buf[:0:nu], buf[nu:nu:2*nu], buf[2*nu:2*nu:3*nu-1]
	add := func(u float64) {
		cv.l = append(cv.l, u*c)
		cv.v = append(cv.v, at(u))
	}
	add(0)
	for _, p := range pts {
		if p[0] > 0 && p[0] < maxU {
			add(p[0])
		}
	}
	add(maxU)
	for k := 0; k+1 < len(cv.l); k++ {
		dl := cv.l[k+1] - cv.l[k]
		sl := 0.0
		if dl > 0 {
			sl = math.Max(0, (cv.v[k+1]-cv.v[k])/dl)
		}
		cv.s = append(cv.s, sl)
	}
	// Keep slopes non-decreasing despite rounding.
	for k := 1; k < len(cv.s); k++ {
		cv.s[k] = math.Max(cv.s[k], cv.s[k-1])
	}
	return cv
}

// seg returns the segment index containing L.
func (c *curve) seg(L float64) int {
	k := 0
	for k+1 < len(c.s) && L >= c.l[k+1] {
		k++
	}
	return k
}

// f is the latency at load L.
func (c *curve) f(L float64) float64 {
	if len(c.s) == 0 {
		return c.v[0]
	}
	k := c.seg(L)
	return c.v[k] + float64(c.s[k]*(L-c.l[k]))
}

// g is the latency rate L*f(L).
func (c *curve) g(L float64) float64 { return float64(L * c.f(L)) }

// dLeft and dRight are the one-sided derivatives of g at L; dRight(cap)
// is +Inf (the capacity wall) and dLeft(0) is -Inf.
func (c *curve) dLeft(L float64) float64 {
	if L <= 0 {
		return math.Inf(-1)
	}
	k := 0
	for k+1 < len(c.s) && L > c.l[k+1] {
		k++
	}
	return c.v[k] + float64(c.s[k]*(L-c.l[k])) + float64(L*c.s[k])
}

func (c *curve) dRight(L float64) float64 {
	if L >= c.cap {
		return math.Inf(1)
	}
	k := c.seg(L)
	return c.v[k] + float64(c.s[k]*(L-c.l[k])) + float64(L*c.s[k])
}

// inv returns the load L in [0, cap] at which y is a subgradient of g
// (the smallest such L where g is linear), and dL/dy there.
func (c *curve) inv(y float64) (float64, float64) {
	for k := range c.s {
		lo := c.v[k] + float64(c.l[k]*c.s[k]) // g'+(l[k])
		if y <= lo {
			return c.l[k], 0
		}
		hi := c.v[k+1] + float64(c.l[k+1]*c.s[k]) // g'-(l[k+1])
		if y < hi && c.s[k] > 0 {
			return (y - c.v[k] + float64(c.s[k]*c.l[k])) / (2 * c.s[k]), 1 / (2 * c.s[k])
		}
	}
	return c.cap, 0
}
