package optimizer_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/optimizer/synth"
)

// cpuTime is the process's user+system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSolveSparse100x20000 solves the internet-size instance: 100
// clusters, 20,000 engines in 50 regions, each cluster allowed only the
// engines of its 3 nearest regions (about 1,200 of them), at 70% load, to
// a duality gap of 0.1%. Besides ns/op (wall time, which on a shared
// machine includes waiting for a core) it reports cpu-ns/op, the
// process's CPU time per solve (run with GOMAXPROCS=1 so that is one
// core's), the allowed pairs and the certified gap.
func BenchmarkSolveSparse100x20000(b *testing.B) {
	in := synth.SparseInstance(synth.Sparse{Clusters: 100, Engines: 20000, Seed: 1})
	pairs := 0
	for _, row := range in.RTTms {
		pairs += len(row)
	}
	b.ReportAllocs()
	var sol *optimizer.Solution
	n := 0
	cpu0 := cpuTime(b)
	for b.Loop() {
		var err error
		sol, err = optimizer.Solve(in, optimizer.Tolerance(1e-3))
		if err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(n), "cpu-ns/op")
	b.ReportMetric(sol.DualityGap, "gap")
	b.ReportMetric(float64(sol.Iterations), "iters")
	b.ReportMetric(float64(pairs), "pairs")
	b.ReportMetric(sol.TotalShedRPS, "shed-rps")
}

// BenchmarkSolveSparseChurn100x20000 is the internet-size instance with
// churn 20 and 500 (the optimizer service's default) against a realistic
// previous plan: the optimum at 10% more demand.
func BenchmarkSolveSparseChurn100x20000(b *testing.B) {
	cfg := synth.Sparse{Clusters: 100, Engines: 20000, Seed: 1, Load: 0.77}
	prev, err := optimizer.Solve(synth.SparseInstance(cfg), optimizer.Tolerance(1e-3))
	if err != nil {
		b.Fatal(err)
	}
	cfg.Load = 0.7
	for _, cw := range []float64{20, 500} {
		in := synth.SparseInstance(cfg)
		in.Previous, in.ChurnWeight = prev.Weights, cw
		b.Run(fmt.Sprintf("churn=%g", cw), func(b *testing.B) {
			b.ReportAllocs()
			var sol *optimizer.Solution
			n := 0
			cpu0 := cpuTime(b)
			for b.Loop() {
				if sol, err = optimizer.Solve(in, optimizer.Tolerance(1e-3)); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(n), "cpu-ns/op")
			b.ReportMetric(sol.DualityGap, "gap")
			b.ReportMetric(float64(sol.Iterations), "iters")
		})
	}
}

// BenchmarkSolveSparse scales the sparse instance: the same 100 clusters
// and K = 3 nearest of 50 regions with 5,000 to 40,000 engines, so the
// allowed pairs grow 8x while clusters x engines grows 8x too; and 20,000
// engines with K = 1, 3 and 6, where only the allowed pairs change.
func BenchmarkSolveSparse(b *testing.B) {
	type size struct{ engines, k int }
	for _, sz := range []size{{5000, 3}, {10000, 3}, {20000, 1}, {20000, 3}, {20000, 6}, {40000, 3}} {
		in := synth.SparseInstance(synth.Sparse{Clusters: 100, Engines: sz.engines, K: sz.k, Seed: 1})
		pairs := 0
		for _, row := range in.RTTms {
			pairs += len(row)
		}
		b.Run(fmt.Sprintf("100x%d/k=%d", sz.engines, sz.k), func(b *testing.B) {
			b.ReportAllocs()
			var sol *optimizer.Solution
			n := 0
			cpu0 := cpuTime(b)
			for b.Loop() {
				var err error
				sol, err = optimizer.Solve(in, optimizer.Tolerance(1e-3))
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(n), "cpu-ns/op")
			b.ReportMetric(sol.DualityGap, "gap")
			b.ReportMetric(float64(pairs), "pairs")
		})
	}
}
