package main

import (
	"io"
	"log/slog"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/gateway"
)

// BenchmarkApplySnapshot is one gateway's cost of applying a snapshot of
// 1,000 and 20,000 engines (decode, checks, picker tables), without NATS:
// /N when each version carries the same plan (the gateway keeps its
// table), /N-vary when each version moves the weights (it fills a new
// Maglev table), /N-rtt when each version moves the network estimates
// only (a new picker table over the same Maglev table).
func BenchmarkApplySnapshot(b *testing.B) {
	for _, c := range []struct {
		engines int
		weights string
	}{{1000, "same"}, {20000, "same"}, {1000, "vary"}, {20000, "vary"}, {1000, "rtt"}, {20000, "rtt"}} {
		name := strconv.Itoa(c.engines)
		if c.weights != "same" {
			name += "-" + c.weights
		}
		engines := c.engines
		b.Run(name, func(b *testing.B) {
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			g, err := gateway.New("fanout", gateway.Registerer(prometheus.NewRegistry()), gateway.Logger(quiet))
			if err != nil {
				b.Fatal(err)
			}
			var bufs [][]byte
			for v := range 64 {
				raw, err := protoMarshal(snapshot("fanout", uint64(v+1), engines, c.weights))
				if err != nil {
					b.Fatal(err)
				}
				bufs = append(bufs, raw)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(bufs[0])))
			k := 0
			cpu0 := cpuNanos()
			for b.Loop() {
				if k == len(bufs) {
					b.StopTimer()
					paused := cpuNanos()
					g, _ = gateway.New("fanout", gateway.Registerer(prometheus.NewRegistry()), gateway.Logger(quiet))
					k = 0
					cpu0 += cpuNanos() - paused
					b.StartTimer()
				}
				if err := g.ApplySnapshot(bufs[k]); err != nil {
					b.Fatal(err)
				}
				k++
			}
			// The process's CPU time (GC included) is steadier than the
			// wall time on a shared machine.
			b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
