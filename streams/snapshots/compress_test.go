package snapshots

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

// varied is bench/fanout's one-cluster snapshot of engines (weights
// "same"): each engine's weight, engine_ms, marginal_ms and
// planned_utilization, and each of 150 regions' network_ms, from a PRNG,
// so it compresses as a solver's full-precision numbers do, not as
// repeated values.
func varied(engines int) *schemas.WeightSnapshot {
	rng := func(key uint64) *rand.Rand { return rand.New(rand.NewPCG(key, 0)) }
	cw := &schemas.ClusterWeights{Cluster: "fanout", DemandRps: 1000, ExpectedLatencyMs: 250}
	w := make([]float64, engines)
	sum := 0.0
	for j := range w {
		w[j] = 1 + 9*rng(2<<32+uint64(j)).Float64()
		sum += w[j]
	}
	for j := range engines {
		r := rng(uint64(j))
		engineMs := 150 + 250*r.Float64()
		marginal := engineMs * (1.2 + 1.8*r.Float64())
		util := 0.2 + 0.7*r.Float64()
		region := uint64(j % 150)
		cw.Weights = append(cw.Weights, &schemas.EngineWeight{
			EngineId:           fmt.Sprintf("e-%05d", j),
			EndpointUrl:        fmt.Sprintf("http://e-%05d.engines.example.net:8000", j),
			Weight:             w[j] / sum,
			Explanation:        &schemas.Explanation{NetworkMs: 2 + float64(region) + rng(1<<32+region).Float64(), EngineMs: engineMs, MarginalMs: marginal},
			PlannedUtilization: util,
		})
	}
	return &schemas.WeightSnapshot{SchemaVersion: 1, Version: 1, CreatedUnixMs: time.Now().UnixMilli(),
		Clusters: []*schemas.ClusterWeights{cw}}
}

func marshal(t testing.TB, s *schemas.WeightSnapshot) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCompressionOption(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{{"", true}, {CompressionNone, true}, {CompressionS2, true}, {"S2", false}, {"zstd", false}} {
		var cfg cfg
		Compression(c.name).apply(&cfg)
		err := cfg.validate()
		_, perr := ParseCompression(c.name)
		if (err == nil) != c.ok || (perr == nil) != c.ok {
			t.Errorf("%q: validate %v, ParseCompression %v; want ok %v", c.name, err, perr, c.ok)
		}
		if !c.ok && (!errors.Is(err, ErrCompression) || !errors.Is(perr, ErrCompression)) {
			t.Errorf("%q: %v, %v; want ErrCompression", c.name, err, perr)
		}
	}
}

// TestCompressRoundTrip: a compressed value starts with ValueMagic and
// decodes to the bytes compressed; without compression, and for any
// value not starting with 0x00, the value is the bytes themselves.
func TestCompressRoundTrip(t *testing.T) {
	for _, b := range [][]byte{nil, {0x08, 0x01}, marshal(t, snap1()), marshal(t, varied(1000))} {
		v, err := compress(CompressionS2, b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(v, ValueMagic) {
			t.Fatalf("%d bytes: compressed value starts % x", len(b), v[:min(len(v), 4)])
		}
		got, err := DecodeValue(v)
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("%d bytes: decoded %d bytes, %v", len(b), len(got), err)
		}
		if plain, err := compress(CompressionNone, b); err != nil || !bytes.Equal(plain, b) {
			t.Fatalf("%d bytes without compression: %d bytes, %v", len(b), len(plain), err)
		}
		if got, err := DecodeValue(b); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("%d plain bytes decoded to %d bytes, %v", len(b), len(got), err)
		}
	}
	big := marshal(t, varied(1000))
	if v, _ := compress(CompressionS2, big); len(v) > len(big)*3/4 {
		t.Fatalf("1,000 varied engines: %d bytes compressed to %d", len(big), len(v))
	}
}

func snap1() *schemas.WeightSnapshot {
	return &schemas.WeightSnapshot{SchemaVersion: 1, Version: 7, Clusters: []*schemas.ClusterWeights{{Cluster: "eu",
		Weights: []*schemas.EngineWeight{{EngineId: "a", EndpointUrl: "http://127.0.0.1:1", Weight: 1}}}}}
}

// hostile are stored values DecodeValue must reject with ErrValue.
func hostile(t testing.TB) map[string][]byte {
	t.Helper()
	good, err := compress(CompressionS2, marshal(t, varied(50)))
	if err != nil {
		t.Fatal(err)
	}
	huge := append(append([]byte(nil), ValueMagic...), binary.AppendUvarint(nil, MaxValueBytes+1)...)
	huge = append(huge, 0x00, 0x00, 0x00)
	max32 := append(append([]byte(nil), ValueMagic...), binary.AppendUvarint(nil, 1<<32-1)...)
	v2 := append([]byte(nil), good...)
	v2[len(ValueMagic)-1] = 0x02
	return map[string][]byte{
		"truncated":                      good[:len(good)/2],
		"magic only":                     ValueMagic,
		"magic without version":          ValueMagic[:len(ValueMagic)-1],
		"magic version 2":                v2,
		"zero byte garbage":              {0x00, 0x01, 0x02, 0x03, 0x04},
		"single zero byte":               {0x00},
		"decoded length above the limit": huge,
		"decoded length 4 GiB":           max32,
		"length varint overlong":         append(append([]byte(nil), ValueMagic...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
	}
}

func TestDecodeValueRejectsHostile(t *testing.T) {
	for name, v := range hostile(t) {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeValue(v)
			if !errors.Is(err, ErrValue) || got != nil {
				t.Fatalf("DecodeValue = %d bytes, %v; want ErrValue", len(got), err)
			}
		})
	}
}

// TestStoreDecodeRejectsHostile: the store's decode (Get, LatestVersion,
// Publish's compare) rejects the hostile values with ErrValue.
func TestStoreDecodeRejectsHostile(t *testing.T) {
	s := &Store{}
	if err := s.cfg.validate(); err != nil {
		t.Fatal(err)
	}
	for name, v := range hostile(t) {
		if _, _, err := s.decode(v); !errors.Is(err, ErrValue) {
			t.Errorf("%s: %v, want ErrValue", name, err)
		}
	}
}

// FuzzDecodeValue: for any bytes b, the compressed value of b decodes to
// b; for any stored value v, decodeValue never panics, returns at most
// the limit's bytes, returns v itself when v does not start with 0x00,
// and agrees with s2.Decode (the library it wraps) on the block after
// ValueMagic.
func FuzzDecodeValue(f *testing.F) {
	f.Add(marshal(f, snap1()))
	good, err := compress(CompressionS2, marshal(f, snap1()))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	for _, v := range hostile(f) {
		f.Add(v)
	}
	const limit = 1 << 16
	f.Fuzz(func(t *testing.T, v []byte) {
		if len(v) <= limit {
			c, err := compress(CompressionS2, v)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := decodeValue(c, limit); err != nil || !bytes.Equal(got, v) {
				t.Fatalf("round trip of %d bytes: %d bytes, %v", len(v), len(got), err)
			}
		}
		got, err := decodeValue(v, limit)
		switch {
		case len(v) == 0 || v[0] != 0x00:
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("plain value: %d bytes, %v", len(got), err)
			}
			return
		case err != nil:
			if !errors.Is(err, ErrValue) || got != nil {
				t.Fatalf("error %v with %d bytes, want ErrValue and none", err, len(got))
			}
			return
		}
		if len(got) > limit {
			t.Fatalf("decoded %d bytes, above the limit %d", len(got), limit)
		}
		want, werr := s2.Decode(nil, v[len(ValueMagic):])
		if werr != nil || !bytes.Equal(got, want) || !bytes.HasPrefix(v, ValueMagic) {
			t.Fatalf("decoded %d bytes; s2.Decode: %d bytes, %v", len(got), len(want), werr)
		}
	})
}

// BenchmarkCompressedSnapshot is the cost of the compressed form of a
// one-cluster snapshot of 1,000 and 20,000 engines with varied values
// (as bench/fanout's): compress (what Publish adds per key) and decode
// (what each gateway's watcher adds per value: DecodeValue). It reports
// the protobuf and the compressed sizes.
func BenchmarkCompressedSnapshot(b *testing.B) {
	for _, n := range []int{1000, 20000} {
		raw := marshal(b, varied(n))
		v, err := compress(CompressionS2, raw)
		if err != nil {
			b.Fatal(err)
		}
		report := func(b *testing.B) {
			b.ReportMetric(float64(len(raw)), "proto-bytes")
			b.ReportMetric(float64(len(v)), "value-bytes")
			b.ReportMetric(float64(len(raw))/float64(len(v)), "ratio")
		}
		b.Run(fmt.Sprintf("%d/compress", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := compress(CompressionS2, raw); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(fmt.Sprintf("%d/decode", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := DecodeValue(v); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
	}
}
