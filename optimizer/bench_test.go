package optimizer_test

import (
	"fmt"
	"testing"

	"github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/optimizer/synth"
)

// BenchmarkSolve solves synthetic fleets with full latency matrices and
// heterogeneous profiles to a duality gap of 0.1% and reports the gap
// and sweep count.
func BenchmarkSolve(b *testing.B) {
	for _, size := range []struct{ c, e int }{{8, 64}, {32, 256}, {64, 1024}} {
		for _, load := range []float64{0.7, 1.2} {
			in := synth.Instance(synth.Config{Clusters: size.c, Engines: size.e, Seed: 1, Load: load})
			b.Run(fmt.Sprintf("%dx%d/load=%.1f", size.c, size.e, load), func(b *testing.B) {
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
				b.ReportMetric(float64(sol.Iterations), "sweeps")
			})
		}
	}
}
