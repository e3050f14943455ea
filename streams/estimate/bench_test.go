package estimate

import "testing"

func BenchmarkConvexFit(b *testing.B) {
	obs := []Obs{{0.1, 60, 10}, {0.2, 64, 10}, {0.35, 70, 5}, {0.5, 90, 12}}
	b.ReportAllocs()
	for b.Loop() {
		ConvexFit(obs, "h100", TTFT)
	}
}
