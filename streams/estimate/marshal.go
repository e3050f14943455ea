package estimate

import (
	"encoding/binary"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchyard-llm/switchyard/schemas"
)

// appendEstimate appends e's wire encoding to b: the bytes
// proto.MarshalOptions{Deterministic: true} produces (fields in number
// order, proto3 zero values omitted, -0 kept), written directly instead of
// through protobuf reflection. ok is false, with b unchanged, for anything
// the direct path does not write exactly like proto.Marshal (unknown
// fields, nil messages inside the estimate, invalid UTF-8, which
// proto.Marshal rejects); the caller then uses proto.Marshal.
// TestAppendEstimateMatchesProto fills every field of every estimate
// message, so a field added to the schema and not here fails it.
func appendEstimate(b []byte, e *schemas.Estimate, enc *Encoder) (_ []byte, ok bool) {
	if e == nil || len(e.ProtoReflect().GetUnknown()) > 0 {
		return b, false
	}
	n := len(b)
	switch k := e.GetKind().(type) {
	case nil:
		return b, true
	case *schemas.Estimate_Engine:
		b, ok = appendNested(b, 1, engineMsg{k.Engine, enc}, appendEngine)
	case *schemas.Estimate_Demand:
		b, ok = appendNested(b, 2, demandMsg{k.Demand}, appendDemand)
	case *schemas.Estimate_Network:
		b, ok = appendNested(b, 3, networkMsg{k.Network}, appendNetwork)
	default:
		ok = false
	}
	if !ok {
		return b[:n], false
	}
	return b, true
}

// appendNested appends field num holding message m (length-delimited),
// written by enc. A nil m is left to proto.Marshal (ok false).
func appendNested[M interface {
	isNil() bool
	hasUnknown() bool
}](b []byte, num protowire.Number, m M, enc func([]byte, M) ([]byte, bool)) ([]byte, bool) {
	if m.isNil() || m.hasUnknown() {
		return b, false
	}
	b = appendTag(b, num, protowire.BytesType)
	// Reserve one length byte; messages of 128 bytes or more move right
	// to make room for a longer varint.
	at := len(b)
	b = append(b, 0)
	b, ok := enc(b, m)
	if !ok {
		return b, false
	}
	size := len(b) - at - 1
	if w := protowire.SizeVarint(uint64(size)); w > 1 {
		b = append(b, make([]byte, w-1)...)
		copy(b[at+w:], b[at+1:at+1+size])
		protowire.AppendVarint(b[at:at], uint64(size))
	} else {
		b[at] = byte(size)
	}
	return b, true
}

// The estimate messages, wrapped so appendNested can check them for
// unknown fields.
type (
	engineMsg struct {
		*schemas.EngineEstimate
		enc *Encoder // nil: no profile cache
	}
	demandMsg  struct{ *schemas.DemandEstimate }
	networkMsg struct{ *schemas.NetworkEstimate }
	profileMsg struct{ *schemas.LatencyProfile }
	pointMsg   struct{ *schemas.ProfilePoint }
	// modelDemandMsg is one of DemandEstimate.models.
	modelDemandMsg struct{ *schemas.ModelDemand }
)

func (m modelDemandMsg) isNil() bool      { return m.ModelDemand == nil }
func (m modelDemandMsg) hasUnknown() bool { return len(m.ProtoReflect().GetUnknown()) > 0 }

func (m engineMsg) isNil() bool  { return m.EngineEstimate == nil }
func (m demandMsg) isNil() bool  { return m.DemandEstimate == nil }
func (m networkMsg) isNil() bool { return m.NetworkEstimate == nil }
func (m profileMsg) isNil() bool { return m.LatencyProfile == nil }
func (m pointMsg) isNil() bool   { return m.ProfilePoint == nil }

func (m engineMsg) hasUnknown() bool  { return len(m.ProtoReflect().GetUnknown()) > 0 }
func (m demandMsg) hasUnknown() bool  { return len(m.ProtoReflect().GetUnknown()) > 0 }
func (m networkMsg) hasUnknown() bool { return len(m.ProtoReflect().GetUnknown()) > 0 }
func (m profileMsg) hasUnknown() bool { return len(m.ProtoReflect().GetUnknown()) > 0 }
func (m pointMsg) hasUnknown() bool   { return len(m.ProtoReflect().GetUnknown()) > 0 }

// appendTag appends a field tag (one byte for the field numbers below 16
// that every estimate field but two has).
func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	if num < 16 {
		return append(b, byte(num)<<3|byte(typ))
	}
	return protowire.AppendTag(b, num, typ)
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = appendTag(b, num, protowire.VarintType)
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

func appendDouble(b []byte, num protowire.Number, v float64) []byte {
	bits := math.Float64bits(v)
	if bits == 0 { // proto3 omits 0 but keeps -0
		return b
	}
	b = appendTag(b, num, protowire.Fixed64Type)
	return binary.LittleEndian.AppendUint64(b, bits)
}

func appendString(b []byte, num protowire.Number, s string) ([]byte, bool) {
	if s == "" {
		return b, true
	}
	if !utf8.ValidString(s) {
		return b, false
	}
	b = appendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s), true
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return append(appendTag(b, num, protowire.VarintType), 1)
}

func appendEngine(b []byte, m engineMsg) ([]byte, bool) {
	ok1, ok2, ok3, ok4 := true, true, true, true
	b = appendUint(b, 1, uint64(m.SchemaVersion))
	b, ok1 = appendString(b, 2, m.EngineId)
	b, ok2 = appendString(b, 3, m.EndpointUrl)
	b, ok3 = appendString(b, 4, m.Region)
	b, ok4 = appendString(b, 5, m.GpuClass)
	if !(ok1 && ok2 && ok3 && ok4) {
		return b, false
	}
	b = appendUint(b, 6, uint64(m.WindowStartUnixMs))
	b = appendUint(b, 7, uint64(m.WindowEndUnixMs))
	b = appendDouble(b, 8, m.CapacityRps)
	b = appendDouble(b, 9, m.CapacityTokensPerS)
	b = appendUint(b, 10, uint64(int64(m.Health)))
	b = appendUint(b, 11, uint64(m.ReadyReplicas))
	b = appendDouble(b, 12, m.KvCacheUsage)
	b = appendDouble(b, 13, m.PrefixHitRate)
	b = appendDouble(b, 14, m.ObservedRps)
	b = appendDouble(b, 15, m.Utilization)
	var ok bool
	for i, p := range []*schemas.LatencyProfile{m.TtftProfile, m.TbotProfile} {
		if p == nil {
			continue
		}
		num := protowire.Number(16 + i)
		if m.enc == nil {
			if b, ok = appendNested(b, num, profileMsg{p}, appendProfile); !ok {
				return b, false
			}
			continue
		}
		pb, ok := m.enc.profile(p)
		if !ok {
			return b, false
		}
		b = appendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(pb)))
		b = append(b, pb...)
	}
	b = appendUint(b, 18, uint64(m.SignalCount))
	b = appendUint(b, 19, uint64(m.MaxBatch))
	b, ok = appendString(b, 20, m.CapacitySource)
	if !ok {
		return b, false
	}
	b = appendDouble(b, 21, m.KvCapacityTokens)
	b = appendDouble(b, 22, m.CacheResidencyS)
	b = appendDouble(b, 23, m.WorkPerRequestS)
	return appendStrings(b, 24, m.Models)
}

// appendStrings appends a repeated string field (every element, empty
// ones too, as proto.Marshal does).
func appendStrings(b []byte, num protowire.Number, ss []string) ([]byte, bool) {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return b, false
		}
		b = appendTag(b, num, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	return b, true
}

func appendProfile(b []byte, m profileMsg) ([]byte, bool) {
	for _, pt := range m.Points {
		var ok bool
		if b, ok = appendNested(b, 1, pointMsg{pt}, appendPoint); !ok {
			return b, false
		}
	}
	b = appendUint(b, 2, uint64(m.Samples))
	b = appendDouble(b, 3, m.FitRmseMs)
	return appendBool(b, 4, m.Prior), true
}

func appendPoint(b []byte, m pointMsg) ([]byte, bool) {
	b = appendDouble(b, 1, m.Utilization)
	return appendDouble(b, 2, m.LatencyMs), true
}

func appendDemand(b []byte, m demandMsg) ([]byte, bool) {
	b = appendUint(b, 1, uint64(m.SchemaVersion))
	b, ok := appendString(b, 2, m.Cluster)
	if !ok {
		return b, false
	}
	b = appendUint(b, 3, uint64(m.WindowStartUnixMs))
	b = appendUint(b, 4, uint64(m.WindowEndUnixMs))
	b = appendDouble(b, 5, m.DemandRps)
	b = appendDouble(b, 6, m.MeanPromptTokens)
	b = appendDouble(b, 7, m.MeanOutputTokens)
	b = appendDouble(b, 8, m.ForecastRps)
	b = appendUint(b, 9, uint64(m.RequestCount))
	b = appendUint(b, 10, uint64(m.RejectedCount))
	b = appendUint(b, 11, uint64(m.ShedSnapshotCount))
	b = appendUint(b, 12, uint64(m.ShedAdmissionCount))
	for _, md := range m.Models {
		if b, ok = appendNested(b, 13, modelDemandMsg{md}, appendModelDemand); !ok {
			return b, false
		}
	}
	return b, true
}

func appendModelDemand(b []byte, m modelDemandMsg) ([]byte, bool) {
	b, ok := appendString(b, 1, m.Model)
	if !ok {
		return b, false
	}
	b = appendUint(b, 2, uint64(m.RequestCount))
	return appendDouble(b, 3, m.DemandRps), true
}

func appendNetwork(b []byte, m networkMsg) ([]byte, bool) {
	b = appendUint(b, 1, uint64(m.SchemaVersion))
	b, ok1 := appendString(b, 2, m.Cluster)
	b, ok2 := appendString(b, 3, m.EngineId)
	if !ok1 || !ok2 {
		return b, false
	}
	b = appendUint(b, 4, uint64(m.WindowEndUnixMs))
	b = appendDouble(b, 5, m.RttMs)
	return appendUint(b, 6, uint64(m.Samples)), true
}

// Encoder is AppendMarshal with a cache of latency profile encodings by
// profile identity, for estimates whose profiles are shared and never
// modified (FitCache.Shared): an engine whose profile did not change
// since the previous window costs a copy instead of an encoding. Like
// FitCache it keeps two generations: Rotate, once per window, drops the
// profiles not encoded since the previous Rotate, so it holds at most two
// windows' profiles. Not safe for concurrent use; the zero value is
// ready to use.
type Encoder struct {
	cur, prev map[*schemas.LatencyProfile][]byte
}

// AppendMarshal is AppendMarshal through the profile cache. A profile
// must not be modified once an Encoder has encoded it.
func (enc *Encoder) AppendMarshal(b []byte, e *schemas.Estimate) ([]byte, error) {
	if out, ok := appendEstimate(b, e, enc); ok {
		return out, nil
	}
	return AppendMarshal(b, e)
}

// Rotate starts a new generation.
func (enc *Encoder) Rotate() {
	enc.prev, enc.cur = enc.cur, make(map[*schemas.LatencyProfile][]byte, len(enc.cur))
}

// profile returns p's encoding (without tag and length); ok is false
// for anything the direct encoder leaves to proto.Marshal.
func (enc *Encoder) profile(p *schemas.LatencyProfile) (_ []byte, ok bool) {
	if pb, ok := enc.cur[p]; ok {
		return pb, true
	}
	if pb, ok := enc.prev[p]; ok {
		enc.cur[p] = pb
		return pb, true
	}
	m := profileMsg{p}
	if m.hasUnknown() {
		return nil, false
	}
	pb, ok := appendProfile(nil, m)
	if !ok {
		return nil, false
	}
	if enc.cur == nil {
		enc.cur = map[*schemas.LatencyProfile][]byte{}
	}
	enc.cur[p] = pb
	return pb, true
}
