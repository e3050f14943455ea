package optimizer_test

import (
	"fmt"
	"testing"

	"github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/optimizer/synth"
)

func run(b *testing.B, in *optimizer.Instance) {
	b.ReportAllocs()
	var sol *optimizer.Solution
	for b.Loop() {
		var err error
		sol, err = optimizer.Solve(in, optimizer.Tolerance(1e-3))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(sol.DualityGap, "gap")
	b.ReportMetric(float64(sol.Iterations), "iters")
}

// BenchmarkSolve solves synthetic fleets with full latency matrices and
// heterogeneous profiles to a duality gap of 0.1% at 70% load, at 120%
// load (shedding) and with churn against a realistic previous plan, and
// reports the certified gap and the iteration count.
func BenchmarkSolve(b *testing.B) {
	for _, size := range []struct{ c, e int }{{8, 64}, {32, 256}, {64, 1024}} {
		for _, load := range []float64{0.7, 1.2} {
			in := synth.Instance(synth.Config{Clusters: size.c, Engines: size.e, Seed: 1, Load: load})
			name := fmt.Sprintf("%dx%d/load=%.1f", size.c, size.e, load)
			if load == 1.2 {
				// Churn against a realistic previous plan: the optimum for
				// demands 10% different, churn_weight 20 ms/rps.
				prev, err := optimizer.Solve(in, optimizer.Tolerance(1e-3))
				if err != nil {
					b.Fatal(err)
				}
				in = synth.Instance(synth.Config{Clusters: size.c, Engines: size.e, Seed: 1, Load: 0.7})
				in.Previous, in.ChurnWeight = prev.Weights, 20
				name = fmt.Sprintf("%dx%d/churn", size.c, size.e)
				b.Run(fmt.Sprintf("%dx%d/load=1.2", size.c, size.e), func(b *testing.B) {
					shed := synth.Instance(synth.Config{Clusters: size.c, Engines: size.e, Seed: 1, Load: 1.2})
					run(b, shed)
				})
			}
			b.Run(name, func(b *testing.B) { run(b, in) })
		}
	}
}
