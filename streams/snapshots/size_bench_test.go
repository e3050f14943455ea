package snapshots

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/optimizer"
	"github.com/switchyard-llm/switchyard/optimizer/synth"
	"github.com/switchyard-llm/switchyard/schemas"
)

// BenchmarkClusterSnapshot100x20000 encodes and decodes the per-cluster
// snapshots of the internet-size instance (synth.SparseInstance, 100
// clusters x 20,000 engines, each cluster allowed about 1,200 engines
// of its 3 nearest regions): each key holds only its cluster's engines,
// with explanations and endpoint URLs, as Publish stores them. It reports
// the mean and largest value in bytes and the time per cluster snapshot
// (encode: the store's deterministic marshal; decode: the store's
// decode, unmarshal and trust checks), and the mean value compressed
// (Compression("s2")).
func BenchmarkClusterSnapshot100x20000(b *testing.B) {
	in := synth.SparseInstance(synth.Sparse{Clusters: 100, Engines: 20000, Seed: 1})
	sol, err := optimizer.Solve(in, optimizer.Tolerance(1e-3))
	if err != nil {
		b.Fatal(err)
	}
	endpoints := make(map[string]string, len(in.Engines))
	for _, e := range in.Engines {
		endpoints[e.ID] = "http://" + e.ID + ".engines.example.net:8000"
	}
	now := time.Now()
	var one []*schemas.WeightSnapshot
	for _, cw := range sol.ClusterWeights(endpoints) {
		one = append(one, &schemas.WeightSnapshot{
			SchemaVersion: 1, Version: 1, CreatedUnixMs: now.UnixMilli(),
			Clusters: []*schemas.ClusterWeights{cw}, InputsDigest: in.Digest(), Stats: sol.Stats(),
		})
	}
	s := &Store{}
	if err := s.cfg.validate(); err != nil {
		b.Fatal(err)
	}
	enc := make([][]byte, len(one))
	total, largest, engines, compressed := 0, 0, 0, 0
	for k, snap := range one {
		if enc[k], err = s.encode(snap); err != nil {
			b.Fatal(err)
		}
		v, err := compress(CompressionS2, enc[k])
		if err != nil {
			b.Fatal(err)
		}
		compressed += len(v)
		total += len(enc[k])
		largest = max(largest, len(enc[k]))
		engines += len(snap.GetClusters()[0].GetWeights())
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		k := 0
		for b.Loop() {
			if _, err := s.encode(one[k%len(one)]); err != nil {
				b.Fatal(err)
			}
			k++
		}
		b.ReportMetric(float64(total)/float64(len(one)), "bytes/snapshot")
		b.ReportMetric(float64(largest), "max-bytes")
		b.ReportMetric(float64(engines)/float64(len(one)), "engines/snapshot")
		b.ReportMetric(float64(compressed)/float64(len(one)), "s2-bytes/snapshot")
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		k := 0
		for b.Loop() {
			if _, _, err := s.decode(enc[k%len(enc)]); err != nil {
				b.Fatal(err)
			}
			k++
		}
	})
}
