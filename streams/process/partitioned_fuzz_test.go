package process

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/estimate"
)

// fuzzSeeds returns a real partial and combiner state (panes of the
// golden input) as headers and chunks, and, with add, adds them and a
// few malformed values as (header, chunk) seeds.
func fuzzSeeds(f *testing.F, add bool) (hdr, state []byte, chunks [][]byte) {
	f.Helper()
	topics := streams.TopicsFor("fuzz")
	s, err := newShard(topics, specForBench(), topics.Signals, 0)
	if err != nil {
		f.Fatal(err)
	}
	for _, r := range workloadRecords(topics, 1) {
		if r.Topic == topics.Signals && r.Timestamp.Before(time.Date(2026, 11, 2, 9, 0, 20, 0, time.UTC)) {
			if _, _, err := s.Handle(r); err != nil {
				f.Fatal(err)
			}
		}
	}
	p := s.partial()
	chunks = encodeChunks([]partial{p}, 1<<30)
	hdr = appendHeader(nil, p, 7, len(chunks))
	if state, err = combinerStateHeader(combinerState{Watermark: p.MaxT, Next: 5}, 7, len(chunks)); err != nil {
		f.Fatal(err)
	}
	legacy, err := json.Marshal(wirePartial{Topic: "t", Partition: 1, Panes: map[int64][]byte{5: estimate.AppendPane(nil, estimate.NewPane())}})
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range [][2][]byte{
		{hdr, chunks[0]}, {state, chunks[0]}, {legacy, nil}, {nil, nil},
		{[]byte("{}"), nil}, {[]byte(`{"kept":[{"panes":{"1":"AAAA"}}]}`), nil}, {[]byte(`{"kept_gen":"0000000000000007","kept_chunks":1}`), []byte{chunkVersion, 1}},
		{appendHeader(nil, p, 7, 1<<40), chunks[0]}, {hdr, []byte{chunkVersion, 200, 1}},
	} {
		if add {
			f.Add(c[0], c[1])
		}
	}
	return hdr, state, chunks
}

// one returns a chunk function serving c as the only chunk.
func one(c []byte) func(int) ([]byte, bool) {
	return func(i int) ([]byte, bool) { return c, i == 0 }
}

// FuzzDecodePartial: any header and chunk decode to a partial or an
// error, never a panic; a decoded partial encodes to a header and
// chunks that decode to the same encoding.
func FuzzDecodePartial(f *testing.F) {
	fuzzSeeds(f, true)
	f.Fuzz(func(t *testing.T, hdr, chunk []byte) {
		p, err := decodePartial(hdr, one(chunk))
		if err != nil {
			return
		}
		h, cs := encodePartial(p, 9)
		serve := func(i int) ([]byte, bool) {
			if i < len(cs) {
				return cs[i], true
			}
			return nil, false
		}
		q, err := decodePartial(h, serve)
		if err != nil {
			t.Fatalf("re-encoded partial does not decode: %v", err)
		}
		if h2, cs2 := encodePartial(q, 9); !bytes.Equal(h, h2) || !slices.EqualFunc(cs, cs2, bytes.Equal) {
			t.Fatal("partial encoding is not stable")
		}
	})
}

// FuzzDecodeCombinerState: as FuzzDecodePartial, for the combiner's
// checkpoint; a decoded state restores into a combiner without panic.
func FuzzDecodeCombinerState(f *testing.F) {
	fuzzSeeds(f, true)
	f.Fuzz(func(t *testing.T, hdr, chunk []byte) {
		st, err := decodeCombinerState(hdr, one(chunk))
		if err != nil {
			return
		}
		h, cs, err := encodeCombinerState(st, 9)
		if err != nil {
			t.Fatal(err)
		}
		serve := func(i int) ([]byte, bool) {
			if i < len(cs) {
				return cs[i], true
			}
			return nil, false
		}
		again, err := decodeCombinerState(h, serve)
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v", err)
		}
		if h2, cs2, _ := encodeCombinerState(again, 9); !bytes.Equal(h, h2) || !slices.EqualFunc(cs, cs2, bytes.Equal) {
			t.Fatal("state encoding is not stable")
		}
		c, err := newCombiner(specForBench(), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.RestoreState(st)
		c.Fire()
	})
}

// FuzzPartialReader: any records (key, value) in any order give
// partials or errors, never a panic, and the reader holds no more
// generations per partition than maxHeldGens.
func FuzzPartialReader(f *testing.F) {
	hdr, _, chunks := fuzzSeeds(f, false)
	f.Add("fuzz.engine.signals/0/0000000000000007/0", chunks[0], "fuzz.engine.signals/0", hdr)
	f.Add("a/1/0000000000000007/0", []byte(nil), "a/1", []byte{headerVersion})
	f.Fuzz(func(t *testing.T, k1 string, v1 []byte, k2 string, v2 []byte) {
		r := newPartialReader()
		for _, kv := range []struct {
			k string
			v []byte
		}{{k1, v1}, {k2, v2}, {k1, v1}, {k2, v2}} {
			_, _, _ = r.add(kv.k, kv.v)
		}
		for base, o := range r.order {
			if len(o) > maxHeldGens || len(r.held[base]) > maxHeldGens {
				t.Fatalf("%s: %d generations held", base, len(r.held[base]))
			}
		}
	})
}

// TestDecodeBoundedAllocation: values that claim more chunks, segments
// or panes than they hold fail without allocating for the claim.
func TestDecodeBoundedAllocation(t *testing.T) {
	huge := binary.AppendUvarint([]byte{chunkVersion}, 1<<40)
	for name, c := range map[string]struct {
		hdr   []byte
		chunk []byte
	}{
		"chunk count":                {appendHeader(nil, partial{Topic: "t"}, 7, 1<<19), nil},
		"chunk count over the limit": {appendHeader(nil, partial{Topic: "t"}, 7, 1<<40), nil},
		"segments":                   {appendHeader(nil, partial{Topic: "t"}, 7, 1), huge},
		"pane": {appendHeader(nil, partial{Topic: "t"}, 7, 1),
			append(binary.AppendUvarint([]byte{chunkVersion, 1, 1, 't', 0, 0}, 1<<40), 3)},
		"engines": {appendHeader(nil, partial{Topic: "t"}, 7, 1),
			[]byte{chunkVersion, 1, 1, 't', 0, 0, 4, 3, 0xff, 0xff, 0x7f}},
	} {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			chunk := c.chunk
			_, err := decodePartial(c.hdr, func(i int) ([]byte, bool) { return chunk, chunk != nil && i == 0 })
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatal("decoded")
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
				t.Errorf("%d bytes allocated for a %d-byte value", n, len(c.hdr)+len(c.chunk))
			}
		})
	}
}

// TestSanitizeState: a combiner state whose clock is beyond now plus the
// skew loses its clock (not its kept panes); others are kept.
func TestSanitizeState(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	kept := []partial{{Topic: "t", Partition: 1}}
	for _, tc := range []struct {
		name            string
		watermark, next int64
		skew            time.Duration
		wantClock       bool
	}{
		{"past", 900_000, 880_000, time.Minute, true},
		{"within the skew", 1_050_000, 1_000_000, time.Minute, true},
		{"watermark ahead", 1_070_000, 1_000_000, time.Minute, false},
		{"next ahead", 900_000, 1_070_000, time.Minute, false},
		{"no limit", 9_000_000, 9_000_000, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sanitizeState(combinerState{Watermark: tc.watermark, Next: tc.next, Kept: kept}, now, tc.skew)
			if kept := got.Watermark == tc.watermark && got.Next == tc.next; kept != tc.wantClock {
				t.Errorf("clock kept %v (%d, %d), want %v", kept, got.Watermark, got.Next, tc.wantClock)
			}
			if !tc.wantClock && (got.Watermark != 0 || got.Next != 0) {
				t.Errorf("clock %d, %d, want 0, 0", got.Watermark, got.Next)
			}
			if len(got.Kept) != 1 {
				t.Error("kept panes dropped")
			}
		})
	}
}
