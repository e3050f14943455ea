package estimate

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-llm/switchyard/schemas"
)

var decodeAt = time.UnixMilli(1_700_000_000_000)

func fullSignal() *schemas.EngineSignal {
	s := validSignal()
	s.EndpointUrl, s.Region, s.Model = "http://e:8000", "us", "m"
	s.WaitingRequests, s.PrefixCacheHits, s.PrefixCacheQueries, s.PromptTokens = 2, 3, 9, 400
	s.MaxBatch, s.MaxBatchSource, s.KvCapacityTokens = 16, "configured", 16*1<<10
	s.TbotSeconds = &schemas.Histogram{Bounds: []float64{0.01, 0.1}, Counts: []uint64{3, 2, 1}, Sum: 0.2, Count: 6}
	return s
}

func fullEvent() *schemas.RoutingEvent {
	return &schemas.RoutingEvent{
		SchemaVersion: schemas.Version, RequestId: "r1", Cluster: "us", EngineId: "e", SnapshotVersion: 7,
		DecisionReason: "weighted", Attempts: 2, TtftMs: 80, MeanTbotMs: 20, PromptTokens: 500, OutputTokens: 100,
		Status: schemas.RequestStatus_REQUEST_STATUS_OK, EventTimeUnixMs: 1_700_000_000_000, E2EMs: 900,
		Model: "m", HttpStatus: 200, Stream: true, EngineTtftMs: 60, CachedTokens: 4, NetworkRttMs: 12.5,
		Tenant: "acme", AffinityKeyHash: 1<<63 | 5, Priority: schemas.Priority_PRIORITY_HIGH, FinishReason: "stop",
		EngineRegion: "us-east-1", EngineGpuClass: "h100", CompletionTimeUnixMs: 1_700_000_000_900,
		Tried: []*schemas.Attempt{{EngineId: "x", Status: schemas.RequestStatus_REQUEST_STATUS_ERROR, FailureReason: schemas.FailureReason_FAILURE_REASON_SATURATED, HttpStatus: 429, DurationMs: 3},
			{EngineId: "e", Status: schemas.RequestStatus_REQUEST_STATUS_OK, HttpStatus: 200, DurationMs: 800}},
		Decision: schemas.DecisionReason_DECISION_REASON_RETRY, CountedAtArrival: true,
		ClientRequestId: "client-7", TenantSource: "api_key", UsageEstimated: true,
	}
}

func detMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reason normalizes protobuf-go's randomized error spacing.
func reasonOf(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(Reason(err), "\u00a0", " ")
}

// checkSameSignal decodes b with d and with DecodeSignal and fails unless
// both agree on the error and the message.
func checkSameSignal(t *testing.T, d *Decoder, b []byte) {
	t.Helper()
	got, gerr := d.Signal(b, decodeAt)
	want, werr := DecodeSignal(b, decodeAt)
	if reasonOf(gerr) != reasonOf(werr) {
		t.Fatalf("signal %x: error %q, DecodeSignal %q", b, reasonOf(gerr), reasonOf(werr))
	}
	if werr == nil && !bytes.Equal(detMarshal(t, got), detMarshal(t, want)) {
		t.Fatalf("signal %x:\n got  %v\n want %v", b, got, want)
	}
}

func checkSameEvent(t *testing.T, d *Decoder, b []byte) {
	t.Helper()
	got, gerr := d.RoutingEvent(b, decodeAt)
	want, werr := DecodeRoutingEvent(b, decodeAt)
	if reasonOf(gerr) != reasonOf(werr) {
		t.Fatalf("event %x: error %q, DecodeRoutingEvent %q", b, reasonOf(gerr), reasonOf(werr))
	}
	if werr != nil {
		return
	}
	dropUnkept(want) // not kept
	if !bytes.Equal(detMarshal(t, got), detMarshal(t, want)) {
		t.Fatalf("event %x:\n got  %v\n want %v", b, got, want)
	}
}

func decoderSeeds(t testing.TB) (signals, events [][]byte) {
	m := func(x proto.Message) []byte {
		b, err := proto.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	s, ev := m(fullSignal()), m(fullEvent())
	tag := protowire.AppendTag
	noHist := fullSignal()
	noHist.TtftSeconds, noHist.TbotSeconds = nil, nil
	emptyHist := fullSignal()
	emptyHist.TtftSeconds = &schemas.Histogram{}
	nan := fullSignal()
	nan.KvCacheUsage = 2
	badBounds := fullSignal()
	badBounds.TtftSeconds.Bounds = []float64{0.2, 0.1}
	unpacked := protowire.AppendFixed64(tag(nil, 1, protowire.Fixed64Type), 0x3fb999999999999a) // bounds 0.1
	unpacked = protowire.AppendVarint(tag(unpacked, 2, protowire.VarintType), 5)
	unpacked = protowire.AppendVarint(tag(unpacked, 2, protowire.VarintType), 1)
	signals = [][]byte{
		s, m(validSignal()), m(noHist), m(emptyHist), m(nan), m(badBounds), nil, {0xff, 0x01},
		protowire.AppendVarint(tag(bytes.Clone(s), 99, protowire.VarintType), 1),                      // unknown field
		protowire.AppendString(tag(bytes.Clone(s), 2, protowire.BytesType), "e2"),                     // repeated id
		protowire.AppendFixed64(tag(bytes.Clone(s), 2, protowire.Fixed64Type), 1),                     // other wire type
		protowire.AppendBytes(tag(bytes.Clone(s), 14, protowire.BytesType), []byte{0x18}),             // histogram in parts, truncated
		protowire.AppendBytes(tag(bytes.Clone(s), 14, protowire.BytesType), unpacked),                 // histogram in parts
		protowire.AppendBytes(tag(m(noHist), 14, protowire.BytesType), unpacked),                      // unpacked histogram
		protowire.AppendBytes(tag(nil, 2, protowire.BytesType), []byte{0xc3, 0x28}),                   // bad UTF-8
		protowire.AppendVarint(tag(bytes.Clone(s), 8, protowire.VarintType), 1<<40),                   // odd enum
		protowire.AppendVarint(tag(bytes.Clone(s), 1, protowire.VarintType), 1<<32|1),                 // truncated uint32
		protowire.AppendVarint(tag(bytes.Clone(s), 6, protowire.VarintType), ^uint64(0)>>1),           // far future
		protowire.AppendString(tag(bytes.Clone(s), 22, protowire.BytesType), "\xff"),                  // bad UTF-8 source
		protowire.AppendVarint(tag(bytes.Clone(s), 22, protowire.VarintType), 1),                      // source, other wire type
		protowire.AppendFixed64(tag(bytes.Clone(s), 23, protowire.Fixed64Type), math.Float64bits(-1)), // negative KV capacity
		protowire.AppendVarint(tag(bytes.Clone(s), 23, protowire.VarintType), 1),                      // KV capacity, other wire type
	}
	events = [][]byte{
		ev, m(&schemas.RoutingEvent{}), nil, []byte("\x08\x01"), []byte("not a protobuf"),
		protowire.AppendBytes(tag(bytes.Clone(ev), 200, protowire.BytesType), []byte("x")),
		protowire.AppendString(tag(bytes.Clone(ev), 3, protowire.BytesType), "ap"),
		protowire.AppendFixed64(tag(bytes.Clone(ev), 3, protowire.Fixed64Type), 1),
		protowire.AppendString(tag(bytes.Clone(ev), 2, protowire.BytesType), "\xff"),
		protowire.AppendVarint(tag(bytes.Clone(ev), 12, protowire.VarintType), 99),
		protowire.AppendVarint(tag(bytes.Clone(ev), 17, protowire.VarintType), 2),
		protowire.AppendFixed32(tag(bytes.Clone(ev), 8, protowire.Fixed32Type), 1),
		protowire.AppendFixed64(tag(bytes.Clone(ev), 20, protowire.Fixed64Type), math.Float64bits(-3)), // negative rtt
		protowire.AppendFixed64(tag(bytes.Clone(ev), 20, protowire.Fixed64Type), math.Float64bits(math.NaN())),
		protowire.AppendVarint(tag(bytes.Clone(ev), 20, protowire.VarintType), 1), // rtt, other wire type
		{0x1a, 0x09, 'e'},
		protowire.AppendString(tag(bytes.Clone(ev), 21, protowire.BytesType), "\xff"),                     // bad UTF-8 tenant
		protowire.AppendVarint(tag(bytes.Clone(ev), 22, protowire.VarintType), 1),                         // hash, other wire type
		protowire.AppendBytes(tag(bytes.Clone(ev), 28, protowire.BytesType), []byte{0x0a, 0x01, 0xff}),    // attempt, bad UTF-8
		protowire.AppendBytes(tag(bytes.Clone(ev), 28, protowire.BytesType), []byte{0x0a, 0x05, 'e'}),     // attempt, truncated
		protowire.AppendBytes(tag(bytes.Clone(ev), 28, protowire.BytesType), []byte{0x78, 0x01}),          // attempt, unknown field
		protowire.AppendBytes(tag(bytes.Clone(ev), 28, protowire.BytesType), []byte{0x29, 0, 0, 0, 0, 0}), // attempt, short fixed64
		protowire.AppendBytes(tag(bytes.Clone(ev), 28, protowire.BytesType), nil),                         // empty attempt
		protowire.AppendVarint(tag(bytes.Clone(ev), 31, protowire.VarintType), 7),                         // bool 7
		protowire.AppendString(tag(bytes.Clone(ev), 32, protowire.BytesType), "\xff"),                     // bad UTF-8 client request id
		protowire.AppendVarint(tag(bytes.Clone(ev), 34, protowire.VarintType), 3),                         // usage_estimated 3
	}
	return signals, events
}

func TestDecoderMatchesProto(t *testing.T) {
	signals, events := decoderSeeds(t)
	var d Decoder
	// Every input after every other, so no state leaks from one record
	// into the next.
	for _, a := range signals {
		for _, b := range signals {
			checkSameSignal(t, &d, a)
			checkSameSignal(t, &d, b)
		}
	}
	for _, a := range events {
		for _, b := range events {
			checkSameEvent(t, &d, a)
			checkSameEvent(t, &d, b)
		}
	}
}

func TestDecoderAllocs(t *testing.T) {
	s, _ := proto.Marshal(fullSignal())
	ev, _ := proto.Marshal(fullEvent())
	var d Decoder
	if n := testing.AllocsPerRun(100, func() {
		if _, err := d.Signal(s, decodeAt); err != nil {
			t.Fatal(err)
		}
		if _, err := d.RoutingEvent(ev, decodeAt); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per signal and event", n)
	}
}

// FuzzDecoder checks that Decoder and DecodeSignal / DecodeRoutingEvent
// agree on every input, after a valid record has been decoded first.
func FuzzDecoder(f *testing.F) {
	signals, events := decoderSeeds(f)
	for _, b := range append(signals, events...) {
		f.Add(b)
	}
	full, _ := proto.Marshal(fullSignal())
	ev, _ := proto.Marshal(fullEvent())
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Decoder
		checkSameSignal(t, &d, full)
		checkSameSignal(t, &d, b)
		checkSameEvent(t, &d, ev)
		checkSameEvent(t, &d, b)
	})
}

func BenchmarkDecoder(b *testing.B) {
	s, _ := proto.Marshal(fullSignal())
	ev, _ := proto.Marshal(fullEvent())
	b.Run("signal", func(b *testing.B) {
		var d Decoder
		b.ReportAllocs()
		for b.Loop() {
			_, _ = d.Signal(s, decodeAt)
		}
	})
	b.Run("routing_event", func(b *testing.B) {
		var d Decoder
		b.ReportAllocs()
		for b.Loop() {
			_, _ = d.RoutingEvent(ev, decodeAt)
		}
	})
	b.Run("proto_signal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = DecodeSignal(s, decodeAt)
		}
	})
	b.Run("proto_routing_event", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = DecodeRoutingEvent(ev, decodeAt)
		}
	})
}

// TestUvarintMatchesProtowire compares uvarint with
// protowire.ConsumeVarint on edge cases and random bytes.
func TestUvarintMatchesProtowire(t *testing.T) {
	cases := [][]byte{
		nil, {0}, {0x7f}, {0x80}, {0x80, 0x00}, {0xff, 0x01},
		protowire.AppendVarint(nil, ^uint64(0)),
		append(bytes.Repeat([]byte{0xff}, 9), 0x01),
		append(bytes.Repeat([]byte{0xff}, 9), 0x02), // overflow
		bytes.Repeat([]byte{0x80}, 10),              // overflow
		bytes.Repeat([]byte{0x80}, 11),
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.Uint32())
			if r.IntN(3) == 0 {
				b[i] |= 0x80
			}
		}
		cases = append(cases, b)
	}
	for _, b := range cases {
		want, n := protowire.ConsumeVarint(b)
		got, j := uvarint(b, 0)
		if n < 0 && j >= 0 || n >= 0 && (j != n || got != want) {
			t.Fatalf("uvarint(%x) = %d, %d; protowire: %d, %d", b, got, j, want, n)
		}
	}
}
