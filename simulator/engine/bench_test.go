package engine

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkEngine replays a conversational workload (Poisson arrivals at
// ~70% of an h100's capacity, 1000-token prompts of which the first 512
// tokens are one of 50 shared system prompts, 150 output tokens) and
// reports simulated requests per second of CPU.
func BenchmarkEngine(b *testing.B) {
	for _, tc := range []struct {
		name      string
		blockSize int
		rate      float64
		events    bool // Config.CacheEvents, drained after every Advance
	}{
		{"block16", 16, 14, false},
		{"block512", 512, 14, false},
		{"block16_cache_events", 16, 14, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p, _ := LookupPreset("h100")
			p.BlockSize = tc.blockSize
			p.KVBlocks = 24000 * 16 / tc.blockSize
			e, err := New(Config{Preset: p, Replicas: 4, CacheEvents: tc.events})
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			const prompt, output = 1000, 150
			hashes := make([]uint64, prompt/tc.blockSize)
			var at time.Duration
			finished := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				at += time.Duration(rng.ExpFloat64() / (4 * tc.rate) * float64(time.Second))
				sys := uint64(rng.IntN(50))
				for j := range hashes {
					if j*tc.blockSize < 512 {
						hashes[j] = sys<<32 | uint64(j)
					} else {
						hashes[j] = uint64(i)<<32 | uint64(j) | 1<<63
					}
				}
				for _, ev := range e.Advance(at) {
					if ev.Kind == EventFinished {
						finished++
					}
				}
				e.CacheEvents()
				if err := e.Submit(at, Request{ID: uint64(i), PromptTokens: prompt, OutputTokens: output, PrefixHashes: hashes}); err != nil {
					b.Fatal(err)
				}
			}
			for {
				next, ok := e.NextEvent()
				if !ok {
					break
				}
				for _, ev := range e.Advance(next) {
					if ev.Kind == EventFinished {
						finished++
					}
				}
			}
			b.StopTimer()
			if finished != b.N {
				b.Fatalf("%d of %d finished", finished, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "simreq/s")
			st := e.Stats()
			b.ReportMetric(float64(st.PrefixHitTokens)/float64(max(1, st.PrefixQueryTokens)), "hit_rate")
		})
	}
}
