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
// load (shedding) and with churn (20 and 500 ms/rps, the optimizer
// service's default) against a realistic previous plan, and reports the
// certified gap and the iteration count.
func BenchmarkSolve(b *testing.B) {
	for _, size := range []struct{ c, e int }{{8, 64}, {32, 256}, {64, 1024}} {
		cfg := synth.Config{Clusters: size.c, Engines: size.e, Seed: 1}
		cfg.Load = 0.7
		in := synth.Instance(cfg)
		b.Run(fmt.Sprintf("%dx%d/load=0.7", size.c, size.e), func(b *testing.B) { run(b, in) })
		cfg.Load = 1.2
		shed := synth.Instance(cfg)
		b.Run(fmt.Sprintf("%dx%d/load=1.2", size.c, size.e), func(b *testing.B) { run(b, shed) })
		// Churn against a realistic previous plan: the optimum for
		// demands 10% different (the shedding instance).
		prev, err := optimizer.Solve(shed, optimizer.Tolerance(1e-3))
		if err != nil {
			b.Fatal(err)
		}
		for _, cw := range []float64{20, 500} {
			cfg.Load = 0.7
			in := synth.Instance(cfg)
			in.Previous, in.ChurnWeight = prev.Weights, cw
			b.Run(fmt.Sprintf("%dx%d/churn=%g", size.c, size.e, cw), func(b *testing.B) { run(b, in) })
		}
	}
}
