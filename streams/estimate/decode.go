package estimate

import (
	"encoding/binary"
	"math"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/switchyard-llm/switchyard/schemas"
)

// Decoder decodes and validates input records like DecodeSignal and
// DecodeRoutingEvent, with the same results and errors, but without
// allocating per record: it scans the wire format for the fields the
// estimates use into messages it reuses, and interns entity and model
// names. Any
// record that is not plainly encoded (an unknown field, a field with an
// unexpected wire type, a histogram sent in parts, bad UTF-8, truncation)
// goes through proto.Unmarshal instead, so the outcome is always the
// same as DecodeSignal's or DecodeRoutingEvent's.
//
// A returned message is valid until the next call. Routing events come
// back without request_id and decision_reason (checked, not kept:
// no estimate uses them), and their attempts (tried) with only engine_id,
// status and failure_reason. A Decoder is not safe for concurrent use; the
// zero value is ready to use.
type Decoder struct {
	sig        schemas.EngineSignal
	ttft, tbot schemas.Histogram
	// Reused histogram slices: bounds and counts of ttft, tbot.
	bounds [2][]float64
	counts [2][]uint64
	ev     schemas.RoutingEvent
	// Reused attempts of ev.Tried; grown to the most a record had.
	tried  []*schemas.Attempt
	strs   map[string]string
	recent [1 << recentBits]string
}

// maxInterned bounds the interned strings; the table starts over when
// full.
const maxInterned = 1 << 16

// str returns b as an interned string, or ok=false when b is not UTF-8.
// A small direct-mapped cache in front of the table catches the common
// repeats (a partition's cluster, recurring engine ids) without hashing.
func (d *Decoder) str(b []byte) (s string, ok bool) {
	slot := &d.recent[recentSlot(b)]
	if *slot == string(b) {
		return *slot, true
	}
	if s, ok := d.strs[string(b)]; ok {
		*slot = s
		return s, true
	}
	if !utf8.Valid(b) {
		return "", false
	}
	if d.strs == nil || len(d.strs) >= maxInterned {
		d.strs = make(map[string]string, 256)
	}
	s = string(b)
	d.strs[s] = s
	*slot = s
	return s, true
}

// recentSlot picks a slot of Decoder.recent by a multiplicative hash of
// b's length and its first and last 8 bytes (ids differ mostly in their
// last characters; a collision only costs a table lookup).
func recentSlot(b []byte) int {
	var lo, hi uint64
	if n := len(b); n >= 8 {
		lo, hi = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[n-8:])
	} else {
		for i, c := range b {
			lo |= uint64(c) << (8 * i)
		}
	}
	h := (lo^uint64(len(b))<<56)*0x9E3779B97F4A7C15 ^ hi*0xC2B2AE3D27D4EB4F
	return int(h >> (64 - recentBits))
}

// recentBits is log2 of len(Decoder.recent).
const recentBits = 10

// field is one scanned field: its number and wire type, and its value
// (a varint or fixed64 in v, a length-delimited field in b).
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// uvarint reads a varint at b[i:]; j < 0 when it is malformed (as
// protowire.ConsumeVarint: truncated, or more than 64 bits). It is small
// enough to be inlined, so one-byte varints (most tags, values and
// lengths) cost no call.
func uvarint(b []byte, i int) (v uint64, j int) {
	if i < len(b) && b[i] < 0x80 {
		return uint64(b[i]), i + 1
	}
	for s := uint(0); s < 64; s += 7 {
		if i >= len(b) {
			return 0, -1
		}
		c := b[i]
		i++
		if s == 63 && c > 1 {
			return 0, -1
		}
		v |= uint64(c&0x7f) << s
		if c < 0x80 {
			return v, i
		}
	}
	return 0, -1
}

// next scans the field at b[i:] into f and returns the index after it;
// j < 0 when b is malformed or the wire type is one the fast path does
// not take (groups, fixed32). scanSignal and scanRoutingEvent read fields
// the same way in their own loops, without the call per field (through
// next, BenchmarkDecoder's signal and routing_event took 1.2 to 1.5x as
// long).
func next(b []byte, i int, f *field) (j int) {
	tag, i := uvarint(b, i)
	if i < 0 || tag>>3 == 0 || tag>>3 > uint64(protowire.MaxValidNumber) {
		return -1
	}
	f.num, f.typ = protowire.Number(tag>>3), protowire.Type(tag&7)
	switch f.typ {
	case protowire.VarintType:
		f.v, i = uvarint(b, i)
		return i
	case protowire.Fixed64Type:
		if len(b)-i < 8 {
			return -1
		}
		f.v = binary.LittleEndian.Uint64(b[i:])
		return i + 8
	case protowire.BytesType:
		var n uint64
		if n, i = uvarint(b, i); i < 0 || n > uint64(len(b)-i) {
			return -1
		}
		f.b = b[i : i+int(n)]
		return i + int(n)
	}
	return -1
}

// Signal decodes and validates an EngineSignal (see DecodeSignal).
func (d *Decoder) Signal(b []byte, recordTime time.Time) (*schemas.EngineSignal, error) {
	if !d.scanSignal(b) {
		return DecodeSignal(b, recordTime)
	}
	if err := ValidateSignal(&d.sig, recordTime); err != nil {
		return nil, err
	}
	return &d.sig, nil
}

// scanSignal scans b into d.sig, reading fields as next does (in the
// loop, not through it); it accepts exactly what next would.
func (d *Decoder) scanSignal(b []byte) bool {
	s := &d.sig
	*s = schemas.EngineSignal{}
	var haveTTFT, haveTBOT bool
	for i := 0; i < len(b); {
		tag, j := uvarint(b, i)
		num := tag >> 3
		if j < 0 || num == 0 || num > uint64(protowire.MaxValidNumber) {
			return false
		}
		i = j
		switch protowire.Type(tag & 7) {
		case protowire.VarintType:
			var v uint64
			if v, i = uvarint(b, i); i < 0 {
				return false
			}
			switch num {
			case 1:
				s.SchemaVersion = uint32(v)
			case 6:
				s.EventTimeUnixMs = int64(v)
			case 7:
				s.ReadyReplicas = uint32(v)
			case 8:
				s.Health = schemas.Health(int32(v))
			case 21:
				s.MaxBatch = uint32(v)
			default:
				return false
			}
		case protowire.Fixed64Type:
			if len(b)-i < 8 {
				return false
			}
			v := math.Float64frombits(binary.LittleEndian.Uint64(b[i:]))
			i += 8
			switch num {
			case 9:
				s.RunningRequests = v
			case 10:
				s.WaitingRequests = v
			case 11:
				s.KvCacheUsage = v
			case 12:
				s.PrefixCacheHits = v
			case 13:
				s.PrefixCacheQueries = v
			case 16:
				s.IntervalSeconds = v
			case 17:
				s.RequestsFinished = v
			case 18:
				s.PromptTokens = v
			case 19:
				s.GenerationTokens = v
			case 23:
				s.KvCapacityTokens = v
			default:
				return false
			}
		case protowire.BytesType:
			n, j := uvarint(b, i)
			if j < 0 || n > uint64(len(b)-j) {
				return false
			}
			v := b[j : j+int(n)]
			i = j + int(n)
			ok := true
			switch num {
			case 2:
				s.EngineId, ok = d.str(v)
			case 3:
				s.EndpointUrl, ok = d.str(v)
			case 4:
				s.Region, ok = d.str(v)
			case 5:
				s.GpuClass, ok = d.str(v)
			case 20:
				s.Model, ok = d.str(v)
			case 22:
				s.MaxBatchSource, ok = d.str(v)
			case 14:
				if haveTTFT || !scanHist(&d.ttft, &d.bounds[0], &d.counts[0], v) {
					return false
				}
				s.TtftSeconds, haveTTFT = &d.ttft, true
			case 15:
				if haveTBOT || !scanHist(&d.tbot, &d.bounds[1], &d.counts[1], v) {
					return false
				}
				s.TbotSeconds, haveTBOT = &d.tbot, true
			default:
				return false
			}
			if !ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// scanHist decodes a Histogram into h, reusing the slices bb and cb.
func scanHist(h *schemas.Histogram, bb *[]float64, cb *[]uint64, b []byte) bool {
	bounds, counts := (*bb)[:0], (*cb)[:0]
	defer func() { *bb, *cb = bounds, counts }()
	*h = schemas.Histogram{}
	var f field
	for i := 0; i < len(b); {
		if i = next(b, i, &f); i < 0 {
			return false
		}
		switch {
		case f.num == 1 && f.typ == protowire.Fixed64Type:
			bounds = append(bounds, math.Float64frombits(f.v))
		case f.num == 1 && f.typ == protowire.BytesType: // packed
			if len(f.b)%8 != 0 {
				return false
			}
			for p := f.b; len(p) > 0; p = p[8:] {
				v, _ := protowire.ConsumeFixed64(p)
				bounds = append(bounds, math.Float64frombits(v))
			}
		case f.num == 2 && f.typ == protowire.VarintType:
			counts = append(counts, f.v)
		case f.num == 2 && f.typ == protowire.BytesType: // packed
			for p := f.b; len(p) > 0; {
				v, m := protowire.ConsumeVarint(p)
				if m < 0 {
					return false
				}
				counts = append(counts, v)
				p = p[m:]
			}
		case f.num == 3 && f.typ == protowire.Fixed64Type:
			h.Sum = math.Float64frombits(f.v)
		case f.num == 4 && f.typ == protowire.VarintType:
			h.Count = f.v
		default:
			return false
		}
	}
	// proto.Unmarshal leaves absent repeated fields nil.
	if len(bounds) > 0 {
		h.Bounds = bounds
	} else {
		h.Bounds = nil
	}
	if len(counts) > 0 {
		h.Counts = counts
	} else {
		h.Counts = nil
	}
	return true
}

// RoutingEvent decodes and validates a RoutingEvent (see
// DecodeRoutingEvent; request_id, decision_reason and the billing
// fields no estimate uses (tenant, finish_reason, engine_region,
// engine_gpu_class, and each attempt's http_status and duration_ms) are
// checked but not kept).
func (d *Decoder) RoutingEvent(b []byte, recordTime time.Time) (*schemas.RoutingEvent, error) {
	if !d.scanRoutingEvent(b) {
		ev, err := DecodeRoutingEvent(b, recordTime)
		if err != nil {
			return nil, err
		}
		dropUnkept(ev)
		return ev, nil
	}
	if err := ValidateRoutingEvent(&d.ev, recordTime); err != nil {
		return nil, err
	}
	return &d.ev, nil
}

// dropUnkept clears the fields of ev the Decoder checks but does not keep.
func dropUnkept(ev *schemas.RoutingEvent) {
	ev.RequestId, ev.DecisionReason = "", ""
	ev.Tenant, ev.FinishReason, ev.EngineRegion, ev.EngineGpuClass = "", "", "", ""
	ev.ClientRequestId, ev.TenantSource = "", ""
	for _, a := range ev.Tried {
		a.HttpStatus, a.DurationMs = 0, 0
	}
}

// attempt returns the next reused attempt for ev.Tried, reset.
func (d *Decoder) attempt() *schemas.Attempt {
	n := len(d.ev.Tried)
	if n == len(d.tried) {
		d.tried = append(d.tried, &schemas.Attempt{})
	}
	a := d.tried[n]
	*a = schemas.Attempt{}
	d.ev.Tried = d.tried[:n+1]
	return a
}

// scanAttempt scans b into a (engine_id, status and failure_reason; the
// rest checked, not kept) and reports whether b is a plainly encoded
// Attempt (fields 1 string, 2-4 varint, 5 fixed64): then proto.Unmarshal
// accepts it too. Anything else (an unknown field, another wire type, bad
// UTF-8, truncation) is false, and the caller leaves the record to
// proto.Unmarshal.
func (d *Decoder) scanAttempt(b []byte, a *schemas.Attempt) bool {
	for i := 0; i < len(b); {
		tag, j := uvarint(b, i)
		if j < 0 {
			return false
		}
		i = j
		switch num, typ := tag>>3, protowire.Type(tag&7); {
		case num == 1 && typ == protowire.BytesType:
			n, j := uvarint(b, i)
			if j < 0 || n > uint64(len(b)-j) {
				return false
			}
			var ok bool
			if a.EngineId, ok = d.str(b[j : j+int(n)]); !ok {
				return false
			}
			i = j + int(n)
		case num >= 2 && num <= 4 && typ == protowire.VarintType:
			var v uint64
			if v, i = uvarint(b, i); i < 0 {
				return false
			}
			switch num {
			case 2:
				a.Status = schemas.RequestStatus(int32(v))
			case 3:
				a.FailureReason = schemas.FailureReason(int32(v))
			}
		case num == 5 && typ == protowire.Fixed64Type:
			if len(b)-i < 8 {
				return false
			}
			i += 8
		default:
			return false
		}
	}
	return true
}

// scanRoutingEvent scans b into d.ev, reading fields as next does (in
// the loop, not through it); it accepts exactly what next would.
func (d *Decoder) scanRoutingEvent(b []byte) bool {
	ev := &d.ev
	*ev = schemas.RoutingEvent{}
	for i := 0; i < len(b); {
		tag, j := uvarint(b, i)
		num := tag >> 3
		if j < 0 || num == 0 || num > uint64(protowire.MaxValidNumber) {
			return false
		}
		i = j
		switch protowire.Type(tag & 7) {
		case protowire.VarintType:
			var v uint64
			if v, i = uvarint(b, i); i < 0 {
				return false
			}
			switch num {
			case 1:
				ev.SchemaVersion = uint32(v)
			case 5:
				ev.SnapshotVersion = v
			case 7:
				ev.Attempts = uint32(v)
			case 10:
				ev.PromptTokens = uint32(v)
			case 11:
				ev.OutputTokens = uint32(v)
			case 12:
				ev.Status = schemas.RequestStatus(int32(v))
			case 13:
				ev.EventTimeUnixMs = int64(v)
			case 16:
				ev.HttpStatus = uint32(v)
			case 17:
				ev.Stream = v != 0
			case 19:
				ev.CachedTokens = uint32(v)
			case 23:
				ev.Priority = schemas.Priority(int32(v))
			case 27:
				ev.CompletionTimeUnixMs = int64(v)
			case 29:
				ev.FailureReason = schemas.FailureReason(int32(v))
			case 30:
				ev.Decision = schemas.DecisionReason(int32(v))
			case 31:
				ev.CountedAtArrival = v != 0
			case 34:
				ev.UsageEstimated = v != 0
			default:
				return false
			}
		case protowire.Fixed64Type:
			if len(b)-i < 8 {
				return false
			}
			if num == 22 {
				ev.AffinityKeyHash = binary.LittleEndian.Uint64(b[i:])
				i += 8
				continue
			}
			v := math.Float64frombits(binary.LittleEndian.Uint64(b[i:]))
			i += 8
			switch num {
			case 8:
				ev.TtftMs = v
			case 9:
				ev.MeanTbotMs = v
			case 14:
				ev.E2EMs = v
			case 18:
				ev.EngineTtftMs = v
			case 20:
				ev.NetworkRttMs = v
			default:
				return false
			}
		case protowire.BytesType:
			n, j := uvarint(b, i)
			if j < 0 || n > uint64(len(b)-j) {
				return false
			}
			v := b[j : j+int(n)]
			i = j + int(n)
			var ok bool
			switch num {
			case 3:
				ev.Cluster, ok = d.str(v)
			case 4:
				ev.EngineId, ok = d.str(v)
			case 15: // model: demand is split by it
				ev.Model, ok = d.str(v)
			case 2, 6, 21, 24, 25, 26, 32, 33: // not kept
				ok = utf8.Valid(v)
			case 28: // tried: engine, status and failure kept
				ok = d.scanAttempt(v, d.attempt())
			}
			if !ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}
