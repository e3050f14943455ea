// Package synth generates realistic synthetic optimizer instances for
// tests, benchmarks and the LP comparison in bench/lp. Generation is
// deterministic in its seed.
package synth

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/switchyard-llm/switchyard/optimizer"
)

// Config describes a synthetic fleet.
type Config struct {
	Clusters, Engines int
	Seed              uint64
	// Load is total demand as a fraction of total capacity*max_utilization
	// (default 0.7); above 1 forces shedding.
	Load float64
	// ChurnWeight and Previous: when Previous is true, previous weights
	// are the nearest-engines plan.
	ChurnWeight float64
	Previous    bool
	// UnhealthyFraction of engines are marked unhealthy (default 0.02).
	UnhealthyFraction float64
	// Residency, when in (0, 1), keeps only that fraction of the rtt
	// entries (always keeping each cluster's nearest engine); default full
	// matrices.
	Residency float64
}

// Instance builds the instance for cfg: clusters and engines placed in
// regions on a ring (rtt grows with ring distance, 2 ms to ~150 ms, plus
// jitter), engines of classes h100/a100/l4 with capacities 4-40 rps and
// their class prior profiles scaled by up to ±30%, and skewed demand.
func Instance(cfg Config) *optimizer.Instance {
	if cfg.Load == 0 {
		cfg.Load = 0.7
	}
	if cfg.UnhealthyFraction == 0 {
		cfg.UnhealthyFraction = 0.02
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5717c4ad))
	in := &optimizer.Instance{MaxUtilization: 0.95, ChurnWeight: cfg.ChurnWeight, RTTms: map[string]map[string]float64{}}
	regions := max(2, int(math.Sqrt(float64(cfg.Clusters))))
	classes := optimizer.GPUClasses()
	engRegion := make([]int, cfg.Engines)
	totalCap := 0.0
	for j := 0; j < cfg.Engines; j++ {
		class := classes[rng.IntN(len(classes))]
		prior, _ := optimizer.PriorProfile(class)
		scale := 0.7 + float64(0.6*rng.Float64())
		var pts [][2]float64
		for _, p := range prior.Points {
			pts = append(pts, [2]float64{p.Utilization, p.LatencyMs * scale})
		}
		capRPS := 4 + float64(36*rng.Float64())
		healthy := rng.Float64() >= cfg.UnhealthyFraction
		if healthy {
			totalCap += float64(capRPS * in.MaxUtilization)
		}
		engRegion[j] = rng.IntN(regions)
		in.Engines = append(in.Engines, optimizer.Engine{
			ID: fmt.Sprintf("e-%04d", j), CapacityRPS: capRPS, Healthy: healthy, LatencyMs: pts,
		})
	}
	weights := make([]float64, cfg.Clusters)
	sum := 0.0
	for i := range weights {
		weights[i] = math.Exp(rng.NormFloat64() * 0.8)
		sum += weights[i]
	}
	for i := 0; i < cfg.Clusters; i++ {
		id := fmt.Sprintf("c-%03d", i)
		in.Clusters = append(in.Clusters, optimizer.Cluster{ID: id, DemandRPS: cfg.Load * totalCap * weights[i] / sum})
		region := i % regions
		row := map[string]float64{}
		nearest, nearestRTT := "", math.Inf(1)
		for j, e := range in.Engines {
			d := math.Abs(float64(region - engRegion[j]))
			d = math.Min(d, float64(regions)-d) / (float64(regions) / 2)
			rtt := 2 + float64(148*d) + float64(5*rng.Float64())
			if rtt < nearestRTT {
				nearest, nearestRTT = e.ID, rtt
			}
			if cfg.Residency > 0 && cfg.Residency < 1 && rng.Float64() > cfg.Residency {
				continue
			}
			row[e.ID] = math.Round(rtt*100) / 100
		}
		row[nearest] = math.Round(nearestRTT*100) / 100
		in.RTTms[id] = row
	}
	if cfg.Previous {
		in.Previous = map[string]map[string]float64{}
		for _, c := range in.Clusters {
			row := in.RTTms[c.ID]
			best, bestRTT := "", math.Inf(1)
			for id, r := range row {
				if r < bestRTT || (r == bestRTT && id < best) {
					best, bestRTT = id, r
				}
			}
			in.Previous[c.ID] = map[string]float64{best: 1}
		}
	}
	return in
}
