package process

import (
	"bytes"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/streams"
)

// fuzzSeeds are a real partial and combiner state (panes of the golden
// input) and a few malformed values.
func fuzzSeeds(f *testing.F) (partial, state []byte) {
	f.Helper()
	topics := streams.TopicsFor("fuzz")
	s, err := NewShard(topics, specForBench(), topics.Signals, 0)
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
	p := s.Partial()
	if partial, err = encodePartial(p); err != nil {
		f.Fatal(err)
	}
	if state, err = encodeCombinerState(CombinerState{Watermark: p.MaxT, Next: 5, Kept: []Partial{p}}); err != nil {
		f.Fatal(err)
	}
	for _, b := range [][]byte{partial, state, nil, []byte("{}"), []byte(`{"kept":[{"panes":{"1":"AAAA"}}]}`), []byte(`{"panes":{"x":""}}`)} {
		f.Add(b)
	}
	return partial, state
}

// FuzzDecodePartial: any value decodes to a partial or an error, never a
// panic; a decoded partial encodes to a value that decodes to the same
// encoding.
func FuzzDecodePartial(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePartial(b)
		if err != nil {
			return
		}
		enc, err := encodePartial(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := decodePartial(enc)
		if err != nil {
			t.Fatalf("re-encoded partial does not decode: %v", err)
		}
		if enc2, _ := encodePartial(q); !bytes.Equal(enc, enc2) {
			t.Fatal("partial encoding is not stable")
		}
	})
}

// FuzzDecodeCombinerState: as FuzzDecodePartial, for the combiner's
// checkpoint; a decoded state restores into a combiner without panic.
func FuzzDecodeCombinerState(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeCombinerState(b)
		if err != nil {
			return
		}
		enc, err := encodeCombinerState(st)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeCombinerState(enc)
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v", err)
		}
		if enc2, _ := encodeCombinerState(again); !bytes.Equal(enc, enc2) {
			t.Fatal("state encoding is not stable")
		}
		c, err := NewCombiner(specForBench(), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.RestoreState(st)
		c.Fire()
	})
}

// TestSanitizeState: a combiner state whose clock is beyond now plus the
// skew loses its clock (not its kept panes); others are kept.
func TestSanitizeState(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	kept := []Partial{{Topic: "t", Partition: 1}}
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
			got := sanitizeState(CombinerState{Watermark: tc.watermark, Next: tc.next, Kept: kept}, now, tc.skew)
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
