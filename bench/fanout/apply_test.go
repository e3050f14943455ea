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
// 1,000 and 20,000 engines (decode, checks, picker tables), without NATS.
func BenchmarkApplySnapshot(b *testing.B) {
	for _, engines := range []int{1000, 20000} {
		b.Run(strconv.Itoa(engines), func(b *testing.B) {
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			g, err := gateway.New("fanout", gateway.Registerer(prometheus.NewRegistry()), gateway.Logger(quiet))
			if err != nil {
				b.Fatal(err)
			}
			var bufs [][]byte
			for v := range 64 {
				raw, err := protoMarshal(snapshot("fanout", uint64(v+1), engines))
				if err != nil {
					b.Fatal(err)
				}
				bufs = append(bufs, raw)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(bufs[0])))
			k := 0
			for b.Loop() {
				if k == len(bufs) {
					b.StopTimer()
					g, _ = gateway.New("fanout", gateway.Registerer(prometheus.NewRegistry()), gateway.Logger(quiet))
					k = 0
					b.StartTimer()
				}
				if err := g.ApplySnapshot(bufs[k]); err != nil {
					b.Fatal(err)
				}
				k++
			}
		})
	}
}
