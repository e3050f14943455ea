package synth

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/switchyard-llm/switchyard/optimizer"
)

// Sparse describes an internet-size fleet where each cluster may use only
// the engines of its K nearest regions (data residency and latency
// budgets), so the instance has about Clusters*K*Engines/Regions allowed
// pairs instead of Clusters*Engines.
type Sparse struct {
	Clusters, Engines int
	// Regions is the number of regions (default 50); clusters are spread
	// over them round-robin, engines uniformly at random.
	Regions int
	// K is how many nearest regions (its own first) a cluster may use
	// (default 3).
	K    int
	Seed uint64
	// Load is total demand as a fraction of total healthy
	// capacity*max_utilization (default 0.7).
	Load float64
	// UnhealthyFraction of engines are marked unhealthy (default 0.02).
	UnhealthyFraction float64
}

func (c *Sparse) defaults() {
	if c.Regions <= 0 {
		c.Regions = 50
	}
	if c.K <= 0 {
		c.K = 3
	}
	c.K = min(c.K, c.Regions)
	if c.Load == 0 {
		c.Load = 0.7
	}
	if c.UnhealthyFraction == 0 {
		c.UnhealthyFraction = 0.02
	}
}

// SparseInstance builds the instance for cfg: regions at random points of
// a 2-D map (network latency 2 ms within a region, up to ~150 ms across
// the map, plus up to 5 ms of jitter per pair), engines of classes
// h100/a100/l4 with capacities 4-40 rps and their class prior profiles
// scaled by up to ±30%, and log-normally skewed demand. Each cluster's
// demand is at most 0.9 of the healthy capacity of its K regions, so the
// instance does not shed unless Load forces it overall. Generation is
// deterministic in Seed.
func SparseInstance(cfg Sparse) *optimizer.Instance {
	cfg.defaults()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5ba55e))
	type point struct{ x, y float64 }
	regions := make([]point, cfg.Regions)
	for r := range regions {
		regions[r] = point{rng.Float64(), rng.Float64()}
	}
	dist := func(a, b int) float64 {
		return math.Hypot(regions[a].x-regions[b].x, regions[a].y-regions[b].y) / math.Sqrt2
	}
	in := &optimizer.Instance{MaxUtilization: 0.95, RTTms: make(map[string]map[string]float64, cfg.Clusters)}
	classes := optimizer.GPUClasses()
	byRegion := make([][]int, cfg.Regions)
	regionCap := make([]float64, cfg.Regions)
	totalCap := 0.0
	in.Engines = make([]optimizer.Engine, 0, cfg.Engines)
	for j := range cfg.Engines {
		class := classes[rng.IntN(len(classes))]
		prior, _ := optimizer.PriorProfile(class)
		scale := 0.7 + 0.6*rng.Float64()
		pts := make([][2]float64, 0, len(prior.Points))
		for _, p := range prior.Points {
			pts = append(pts, [2]float64{p.Utilization, p.LatencyMs * scale})
		}
		capRPS := 4 + 36*rng.Float64()
		healthy := rng.Float64() >= cfg.UnhealthyFraction
		r := rng.IntN(cfg.Regions)
		if healthy {
			c := capRPS * in.MaxUtilization
			totalCap += c
			regionCap[r] += c
		}
		byRegion[r] = append(byRegion[r], j)
		in.Engines = append(in.Engines, optimizer.Engine{
			ID: fmt.Sprintf("e-%05d", j), CapacityRPS: capRPS, Healthy: healthy, LatencyMs: pts,
		})
	}
	weights := make([]float64, cfg.Clusters)
	sum := 0.0
	for i := range weights {
		weights[i] = math.Exp(rng.NormFloat64() * 0.8)
		sum += weights[i]
	}
	order := make([]int, cfg.Regions)
	for i := range cfg.Clusters {
		id := fmt.Sprintf("c-%03d", i)
		home := i % cfg.Regions
		for r := range order {
			order[r] = r
		}
		slices.SortFunc(order, func(a, b int) int { return cmp.Compare(dist(home, a), dist(home, b)) })
		near := order[:cfg.K]
		reach := 0.0
		n := 0
		for _, r := range near {
			reach += regionCap[r]
			n += len(byRegion[r])
		}
		row := make(map[string]float64, n)
		for _, r := range near {
			base := 2 + 148*dist(home, r)
			for _, j := range byRegion[r] {
				row[in.Engines[j].ID] = math.Round((base+5*rng.Float64())*100) / 100
			}
		}
		in.RTTms[id] = row
		d := math.Min(cfg.Load*totalCap*weights[i]/sum, 0.9*reach)
		in.Clusters = append(in.Clusters, optimizer.Cluster{ID: id, DemandRPS: d})
	}
	return in
}
