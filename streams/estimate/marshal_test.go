package estimate

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/switchyard-llm/switchyard/schemas"
)

// fillAll sets every field of m (recursively, lists with up to 3
// elements) to a random value, zero values and edge cases included.
func fillAll(r *rand.Rand, m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil && m.WhichOneof(fd.ContainingOneof()) != nil {
			continue // one member per oneof
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for n := r.IntN(4); n > 0; n-- {
				if fd.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					fillAll(r, e.Message(), depth+1)
					l.Append(e)
				} else {
					l.Append(randScalar(r, fd))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			if depth < 4 && r.IntN(5) > 0 {
				fillAll(r, m.Mutable(fd).Message(), depth+1)
			}
		default:
			m.Set(fd, randScalar(r, fd))
		}
	}
}

func randScalar(r *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	zero := r.IntN(6) == 0
	switch fd.Kind() {
	case protoreflect.DoubleKind:
		vs := []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), -1.5, 1e-300, r.Float64() * 1e6}
		return protoreflect.ValueOfFloat64(vs[r.IntN(len(vs))])
	case protoreflect.Uint32Kind:
		if zero {
			return protoreflect.ValueOfUint32(0)
		}
		return protoreflect.ValueOfUint32([]uint32{1, 127, 128, math.MaxUint32, r.Uint32()}[r.IntN(5)])
	case protoreflect.Int64Kind:
		if zero {
			return protoreflect.ValueOfInt64(0)
		}
		return protoreflect.ValueOfInt64([]int64{-1, 1, math.MinInt64, 1_800_000_000_000, r.Int64()}[r.IntN(5)])
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 0)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber([]int32{0, 1, 2, 3, -1}[r.IntN(5)]))
	case protoreflect.StringKind:
		if zero {
			return protoreflect.ValueOfString("")
		}
		return protoreflect.ValueOfString([]string{"e1", "us-east/é", strings.Repeat("x", 200)}[r.IntN(3)])
	}
	panic("fillAll: add a case for " + fd.Kind().String())
}

func TestAppendEstimateMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(t *testing.T, e *schemas.Estimate) {
		t.Helper()
		want, werr := proto.MarshalOptions{Deterministic: true}.Marshal(e)
		got, gerr := Marshal(e)
		if (werr != nil) != (gerr != nil) || werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("Marshal(%v) = %x, %v; proto.Marshal = %x, %v", e, got, gerr, want, werr)
		}
		if werr != nil {
			return
		}
		var enc Encoder
		for range 2 { // encoded, then from the cache
			got3, err := enc.AppendMarshal(nil, e)
			if err != nil || !bytes.Equal(got3, want) {
				t.Fatalf("Encoder.AppendMarshal(%v) = %x, %v; want %x", e, got3, err, want)
			}
			enc.Rotate()
		}
		prefix := []byte("prefix")
		got2, _ := AppendMarshal(prefix, e)
		if !bytes.Equal(got2[:len(prefix)], prefix) || !bytes.Equal(got2[len(prefix):], want) {
			t.Fatalf("AppendMarshal(%v) = %x, want prefix + %x", e, got2, want)
		}
	}
	kinds := schemas.File_switchyard_proto.Messages().ByName("Estimate").Oneofs().Get(0).Fields()
	for i := 0; i < 3000; i++ {
		e := &schemas.Estimate{}
		m := e.ProtoReflect()
		fd := kinds.Get(i % kinds.Len())
		fillAll(r, m.Mutable(fd).Message(), 1)
		check(t, e)
	}
	t.Run("edge cases", func(t *testing.T) {
		unknown := &schemas.EngineEstimate{EngineId: "e"}
		unknown.ProtoReflect().SetUnknown(protoreflect.RawFields{0xa8, 0x1f, 0x01})
		for _, e := range []*schemas.Estimate{
			{},
			{Kind: &schemas.Estimate_Engine{}},
			{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{}}},
			{Kind: &schemas.Estimate_Engine{Engine: unknown}},
			{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{EngineId: "bad\xff"}}},
			{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{TtftProfile: &schemas.LatencyProfile{Points: []*schemas.ProfilePoint{nil, {}}}}}},
			{Kind: &schemas.Estimate_Demand{}},
			{Kind: &schemas.Estimate_Network{Network: &schemas.NetworkEstimate{Cluster: strings.Repeat("c", 20000)}}},
		} {
			check(t, e)
		}
	})
}

func BenchmarkMarshal(b *testing.B) {
	e := &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{
		SchemaVersion: 1, EngineId: "e0001", GpuClass: "h100", WindowStartUnixMs: 1_800_000_000_000, WindowEndUnixMs: 1_800_000_010_000,
		CapacityRps: 12.5, ObservedRps: 3, Utilization: 0.4, SignalCount: 5,
		TtftProfile: PriorProfile("h100", TTFT), TbotProfile: PriorProfile("h100", TBOT),
	}}}
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf, _ = AppendMarshal(buf[:0], e)
	}
}

func BenchmarkMarshalProto(b *testing.B) {
	e := &schemas.Estimate{Kind: &schemas.Estimate_Engine{Engine: &schemas.EngineEstimate{
		SchemaVersion: 1, EngineId: "e0001", GpuClass: "h100", WindowStartUnixMs: 1_800_000_000_000, WindowEndUnixMs: 1_800_000_010_000,
		CapacityRps: 12.5, ObservedRps: 3, Utilization: 0.4, SignalCount: 5,
		TtftProfile: PriorProfile("h100", TTFT), TbotProfile: PriorProfile("h100", TBOT),
	}}}
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf, _ = proto.MarshalOptions{Deterministic: true}.MarshalAppend(buf[:0], e)
	}
}
