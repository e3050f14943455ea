// Package policy holds the routing policies the simulator compares:
// Switchyard itself (the real estimators, optimizer and gateway selector,
// imported) and the baselines users would pick instead, each reproducing
// a public design that its doc comment cites.
//
// Every policy runs one gateway per cluster and sees what such a gateway
// would: its own in-flight counts, the health its checks detected, and —
// for the metric-scraping baselines — the engines' gauges.
package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/simulator/des"
)

// Names lists the policies in their canonical order.
func Names() []string {
	return []string{"switchyard", "round-robin", "random", "nearest", "least-outstanding", "p2c", "legacy-irb", "chwbl", "prefix-aware", "llmd-scorer"}
}

// Calibrated is a diagnostic variant of switchyard, not in Names: the
// same pipeline, but each engine's capacity comes from an offline load
// test of the engine model on the run's own workload (see calibrate)
// instead of the processor's capacity estimate. Comparing it with
// switchyard isolates the effect of the capacity estimator.
const Calibrated = "switchyard-calibrated"

// New returns the factory of the named policy; seed drives its random
// choices.
func New(name string, seed uint64) (des.Factory, error) {
	switch name {
	case "switchyard":
		return func(w *des.World) (des.Policy, error) { return newSwitchyard(w, seed) }, nil
	case Calibrated:
		return func(w *des.World) (des.Policy, error) {
			p, err := newSwitchyard(w, seed)
			if err != nil {
				return nil, err
			}
			p.capacity, err = calibrate(w)
			return p, err
		}, nil
	case "round-robin":
		return func(w *des.World) (des.Policy, error) { return &roundRobin{base: newBase(w, seed)}, nil }, nil
	case "random":
		return func(w *des.World) (des.Policy, error) { return &random{base: newBase(w, seed)}, nil }, nil
	case "nearest":
		return func(w *des.World) (des.Policy, error) { return &nearest{base: newBase(w, seed)}, nil }, nil
	case "least-outstanding":
		return func(w *des.World) (des.Policy, error) { return &leastOutstanding{base: newBase(w, seed)}, nil }, nil
	case "p2c":
		return func(w *des.World) (des.Policy, error) { return &p2c{base: newBase(w, seed)}, nil }, nil
	case "legacy-irb":
		return func(w *des.World) (des.Policy, error) { return newLegacy(w, seed) }, nil
	case "chwbl":
		return func(w *des.World) (des.Policy, error) { return newCHWBL(w, seed), nil }, nil
	case "prefix-aware":
		return func(w *des.World) (des.Policy, error) { return newPrefixAware(w, seed), nil }, nil
	case "llmd-scorer":
		return func(w *des.World) (des.Policy, error) { return newLLMD(w, seed), nil }, nil
	}
	return nil, fmt.Errorf("unknown policy %q (known: %s, %s)", name, strings.Join(Names(), ", "), Calibrated)
}

// base is what every gateway knows: the world, its own in-flight counts
// per engine, and a random source.
type base struct {
	w        *des.World
	rng      *rand.Rand
	inflight [][]int // [cluster][engine], this gateway's own requests
	cand     []int   // scratch
	rr       []int   // per-cluster round-robin position
}

func newBase(w *des.World, seed uint64) base {
	b := base{w: w, rng: rand.New(rand.NewPCG(seed, 0x5eed)), rr: make([]int, len(w.Clusters))}
	b.inflight = make([][]int, len(w.Clusters))
	for c := range b.inflight {
		b.inflight[c] = make([]int, len(w.Engines))
	}
	return b
}

// candidates returns the engines the gateway may use: healthy as far as
// its checks know, not already tried by this request.
func (b *base) candidates(exclude []int32) []int {
	b.cand = b.cand[:0]
	for e := range b.w.Engines {
		if b.w.Healthy(e) && !slices.Contains(exclude, int32(e)) {
			b.cand = append(b.cand, e)
		}
	}
	return b.cand
}

func (b *base) picked(r *des.Request, e int) int {
	if e >= 0 {
		b.inflight[r.Cluster][e]++
	}
	return e
}

func (b *base) Done(_ time.Duration, r *des.Request, e int, _ des.Outcome) {
	b.inflight[r.Cluster][e]--
}

func (b *base) Tick(time.Duration) {}

// roundRobin cycles through the healthy engines of the whole fleet: the
// default of nginx upstreams, Envoy's ROUND_ROBIN and Kubernetes Service
// load balancing in practice.
type roundRobin struct{ base }

func (p *roundRobin) Pick(_ time.Duration, r *des.Request, exclude []int32) int {
	c := p.candidates(exclude)
	if len(c) == 0 {
		return -1
	}
	i := p.rr[r.Cluster] % len(c)
	p.rr[r.Cluster]++
	return p.picked(r, c[i])
}

// random picks uniformly among the healthy engines (Envoy's RANDOM load
// balancer).
type random struct{ base }

func (p *random) Pick(_ time.Duration, r *des.Request, exclude []int32) int {
	c := p.candidates(exclude)
	if len(c) == 0 {
		return -1
	}
	return p.picked(r, c[p.rng.IntN(len(c))])
}

// nearest sends each request to its own region only (geo DNS or a
// regional load balancer in front of regional round-robin), failing over
// to the next nearest region only when every local engine is down.
type nearest struct{ base }

func (p *nearest) Pick(_ time.Duration, r *des.Request, exclude []int32) int {
	c := p.candidates(exclude)
	if len(c) == 0 {
		return -1
	}
	rtt := p.w.RTT[r.Cluster]
	best := rtt[c[0]]
	for _, e := range c {
		best = min(best, rtt[e])
	}
	n := 0
	for _, e := range c {
		if rtt[e] == best {
			c[n] = e
			n++
		}
	}
	i := p.rr[r.Cluster] % n
	p.rr[r.Cluster]++
	return p.picked(r, c[i])
}

// leastOutstanding sends each request to the engine with the fewest
// requests in flight from this gateway (Envoy's LEAST_REQUEST with full
// scan, nginx least_conn); ties rotate.
type leastOutstanding struct{ base }

func (p *leastOutstanding) Pick(_ time.Duration, r *des.Request, exclude []int32) int {
	c := p.candidates(exclude)
	if len(c) == 0 {
		return -1
	}
	in := p.inflight[r.Cluster]
	start := p.rr[r.Cluster] % len(c)
	p.rr[r.Cluster]++
	best := c[start]
	for k := 1; k < len(c); k++ {
		e := c[(start+k)%len(c)]
		if in[e] < in[best] {
			best = e
		}
	}
	return p.picked(r, best)
}

// p2c is the power of two random choices on in-flight requests
// (Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing",
// 2001; Envoy's default LEAST_REQUEST with choice_count 2, Linkerd's
// and Finagle's P2C balancers).
type p2c struct{ base }

func (p *p2c) Pick(_ time.Duration, r *des.Request, exclude []int32) int {
	c := p.candidates(exclude)
	switch len(c) {
	case 0:
		return -1
	case 1:
		return p.picked(r, c[0])
	}
	i := p.rng.IntN(len(c))
	j := p.rng.IntN(len(c) - 1)
	if j >= i {
		j++
	}
	a, b := c[i], c[j]
	if p.inflight[r.Cluster][b] < p.inflight[r.Cluster][a] {
		a = b
	}
	return p.picked(r, a)
}
