package policy

import (
	"math"
	"time"

	"github.com/switchyard-llm/switchyard/gateway/pick"
	"github.com/switchyard-llm/switchyard/simulator/des"
)

// legacy reproduces the design Switchyard replaces (see issue 3,
// "Stability"): weighted consistent hashing whose weights come from a
// proportional controller on each engine's latency relative to the fleet
// average — the feedback loop of latency-based load balancers such as
// Envoy's/Finagle's latency-EWMA weighting or Google's "weighted round
// robin from server utilization" (ORCA / WRR) run without damping. Every
// LegacyPeriodS each engine's weight is multiplied by
// 1 − gain·(latency/average − 1) (clamped to [0.1, 2] per step, floor
// 0.01), using latencies measured LegacyLagS earlier (the metrics
// pipeline's lag), and the weights are renormalised. The same weights
// serve every cluster; requests hash on their conversation key into a
// weighted Maglev table without load bounds (pick with unbounded slack).
type legacy struct {
	w      *des.World
	gain   float64
	period time.Duration
	lag    int // periods
	weight []float64
	hist   [][]acc // ring of per-period latency sums per engine
	cur    []acc
	next   time.Duration
	gw     []*gateway
	ver    uint64
	snap   [][]float64
}

func newLegacy(w *des.World, _ uint64) (*legacy, error) {
	n := len(w.Engines)
	p := &legacy{
		w: w, gain: w.Control.LegacyGain,
		period: time.Duration(w.Control.LegacyPeriodS * float64(time.Second)),
		weight: make([]float64, n), cur: make([]acc, n),
	}
	p.lag = int(math.Round(w.Control.LegacyLagS / w.Control.LegacyPeriodS))
	p.next = p.period
	for e := range p.weight {
		p.weight[e] = 1 / float64(n)
	}
	for range w.Clusters {
		g := &gateway{pool: pick.NewPool()}
		for _, e := range w.Engines {
			g.states = append(g.states, g.pool.State(e.ID))
		}
		p.gw = append(p.gw, g)
	}
	if err := p.build(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *legacy) build() error {
	specs := make([]pick.Spec, 0, len(p.weight))
	for e, info := range p.w.Engines {
		specs = append(specs, pick.Spec{ID: info.ID, Weight: p.weight[e]})
	}
	for _, g := range p.gw {
		t, err := g.pool.Build(specs, pick.Options{Slack: 1e9, Floor: 1e9})
		if err != nil {
			return err
		}
		g.install(t, p.w)
	}
	p.ver++
	p.snap = make([][]float64, len(p.w.Clusters))
	for c := range p.snap {
		p.snap[c] = append([]float64(nil), p.weight...)
	}
	return nil
}

func (p *legacy) Pick(_ time.Duration, r *des.Request, exclude []int32) int {
	g := p.gw[r.Cluster]
	g.ex = g.ex[:0]
	for _, e := range exclude {
		if i := g.toTable[e]; i >= 0 {
			g.ex = append(g.ex, int32(i))
		}
	}
	i, _ := g.table.Pick(r.Key, g.ex)
	if i < 0 {
		return -1
	}
	return g.toWorld[i]
}

func (p *legacy) Done(_ time.Duration, r *des.Request, e int, o des.Outcome) {
	p.gw[r.Cluster].states[e].Release()
	if o.OK {
		p.cur[e].n++
		p.cur[e].sum += float64(o.TTFT) / 1e6
	}
}

func (p *legacy) Tick(now time.Duration) {
	for _, g := range p.gw {
		for e, st := range g.states {
			st.SetDown(!p.w.Healthy(e))
		}
	}
	for now >= p.next {
		p.next += p.period
		p.hist = append(p.hist, p.cur)
		p.cur = make([]acc, len(p.w.Engines))
		if len(p.hist) <= p.lag {
			continue
		}
		obs := p.hist[len(p.hist)-1-p.lag]
		if len(p.hist) > p.lag+1 {
			p.hist = p.hist[len(p.hist)-p.lag-1:]
		}
		p.control(obs)
	}
}

// control is one proportional step on the observed mean latencies.
func (p *legacy) control(obs []acc) {
	avg, n := 0.0, 0
	for _, a := range obs {
		if a.n > 0 {
			avg += a.sum / a.n
			n++
		}
	}
	if n == 0 || avg <= 0 {
		return
	}
	avg /= float64(n)
	sum := 0.0
	for e, a := range obs {
		if a.n > 0 {
			f := 1 - p.gain*(a.sum/a.n/avg-1)
			p.weight[e] *= math.Min(2, math.Max(0.1, f))
		}
		p.weight[e] = math.Max(p.weight[e], 0.01)
		sum += p.weight[e]
	}
	for e := range p.weight {
		p.weight[e] /= sum
	}
	_ = p.build()
}

// Weights implements des.Weighted.
func (p *legacy) Weights() (uint64, [][]float64) { return p.ver, p.snap }
