package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func seqFrame(s int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(s)) }

func mustPack(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var sha = bytes.Repeat([]byte{0xab}, 32)

// Each case is one payload in one of vLLM's encodings and the events it
// must decode to.
func TestParseMessageDecodesBothEncodingsAndBothHashForms(t *testing.T) {
	stored := Event{Kind: KindStored, Type: "BlockStored", BlockHashes: []Hash{IntHash(7), IntHash(uint64(1 << 63))},
		ParentHash: IntHash(uint64(0xffffffffffffffff)), TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 2, LoRAID: 3, Medium: "GPU", LoRAName: "ad"}
	cases := []struct {
		name    string
		payload any
		want    []Event
		rank    int64
		hasRank bool
	}{
		{"array, int hashes, all fields", []any{1.5, []any{
			[]any{"BlockStored", []any{7, uint64(1 << 63)}, -1, []any{1, 2, 3, 4}, 2, 3, "GPU", "ad"},
			[]any{"BlockRemoved", []any{7}, nil},
			[]any{"AllBlocksCleared"},
		}, 2}, []Event{stored, {Kind: KindRemoved, Type: "BlockRemoved", BlockHashes: []Hash{IntHash(7)}}, {Kind: KindCleared, Type: "AllBlocksCleared"}}, 2, true},
		{"array, bytes hashes, trailing fields missing", []any{1.5, []any{
			[]any{"BlockStored", []any{sha}, nil, []any{5}, 16},
		}}, []Event{{Kind: KindStored, Type: "BlockStored", BlockHashes: []Hash{sha}, TokenIDs: []uint32{5}, BlockSize: 16}}, 0, false},
		{"array, unknown trailing fields and unknown event type", []any{1.5, []any{
			[]any{"BlockRemoved", []any{sha}, "CPU", 0, map[string]any{"x": []any{1}}},
			[]any{"BlockTransferred", []any{1}, "GPU", "CPU"},
		}, nil, "future"}, []Event{{Kind: KindRemoved, Type: "BlockRemoved", BlockHashes: []Hash{sha}, Medium: "CPU"}, {Kind: KindOther, Type: "BlockTransferred"}}, 0, false},
		{"map batch of map events", map[string]any{"ts": 1.5, "data_parallel_rank": nil, "events": []any{
			map[string]any{"type": "BlockStored", "block_hashes": []any{7, uint64(1 << 63)}, "parent_block_hash": -1, "token_ids": []any{1, 2, 3, 4},
				"block_size": 2, "lora_id": 3, "medium": "GPU", "lora_name": "ad", "extra_keys": nil, "group_idx": 0},
			map[string]any{"block_hashes": []any{sha}, "medium": nil, "type": "BlockRemoved"},
		}}, []Event{stored, {Kind: KindRemoved, Type: "BlockRemoved", BlockHashes: []Hash{sha}}}, 0, false},
		{"array batch of map events (vLLM since events lost array_like)", []any{1.5, []any{
			map[string]any{"type": "AllBlocksCleared"},
		}, 0}, []Event{{Kind: KindCleared, Type: "AllBlocksCleared"}}, 0, true},
		{"num_toks_per_block list of the earliest versions", []any{1.5, []any{
			[]any{"BlockStored", []any{7}, nil, []any{1, 2}, []any{2}, nil},
		}}, []Event{{Kind: KindStored, Type: "BlockStored", BlockHashes: []Hash{IntHash(7)}, TokenIDs: []uint32{1, 2}, BlockSize: 2}}, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ParseMessage([][]byte{[]byte("kv"), seqFrame(41), mustPack(t, tc.payload)})
			if err != nil {
				t.Fatal(err)
			}
			if b.Seq != 41 || b.Topic != "kv" || b.TS != 1.5 || b.HasRank != tc.hasRank || b.DataParallelRank != tc.rank {
				t.Fatalf("batch header %+v", b)
			}
			if len(b.Events) != len(tc.want) {
				t.Fatalf("got %d events %+v, want %+v", len(b.Events), b.Events, tc.want)
			}
			for i, e := range b.Events {
				if !eventEqual(e, tc.want[i]) {
					t.Errorf("event %d = %+v, want %+v", i, e, tc.want[i])
				}
			}
		})
	}
}

func eventEqual(a, b Event) bool {
	if a.Kind != b.Kind || a.Type != b.Type || !bytes.Equal(a.ParentHash, b.ParentHash) || a.BlockSize != b.BlockSize ||
		a.LoRAID != b.LoRAID || a.LoRAName != b.LoRAName || a.Medium != b.Medium || len(a.BlockHashes) != len(b.BlockHashes) || len(a.TokenIDs) != len(b.TokenIDs) {
		return false
	}
	for i := range a.BlockHashes {
		if !bytes.Equal(a.BlockHashes[i], b.BlockHashes[i]) {
			return false
		}
	}
	for i := range a.TokenIDs {
		if a.TokenIDs[i] != b.TokenIDs[i] {
			return false
		}
	}
	return true
}

func TestParseMessageRejectsMalformedInputWithReason(t *testing.T) {
	good := mustPack(t, []any{1.0, []any{}})
	huge := []byte{0xdd, 0xff, 0xff, 0xff, 0xff} // array32 of 2^32-1 elements, nothing after
	cases := []struct {
		name   string
		frames [][]byte
	}{
		{"one frame", [][]byte{good}},
		{"four frames", [][]byte{nil, nil, seqFrame(1), good}},
		{"short sequence", [][]byte{nil, {1, 2}, good}},
		{"negative sequence", [][]byte{nil, seqFrame(-1), good}},
		{"empty payload", [][]byte{nil, seqFrame(1), nil}},
		{"not msgpack container", [][]byte{nil, seqFrame(1), mustPack(t, "hello")}},
		{"huge declared batch", [][]byte{nil, seqFrame(1), huge}},
		{"huge declared events", [][]byte{nil, seqFrame(1), append([]byte{0x92, 0x01}, huge...)}},
		{"huge declared hash bytes", [][]byte{nil, seqFrame(1), append(mustPack(t, []any{1.0})[:1:1], 0x01, 0x91, 0x93, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x91, 0xc6, 0xff, 0xff, 0xff, 0xff)}},
		{"hash too long", [][]byte{nil, seqFrame(1), mustPack(t, []any{1.0, []any{[]any{"BlockRemoved", []any{bytes.Repeat([]byte{1}, 65)}}}})}},
		{"string hash", [][]byte{nil, seqFrame(1), mustPack(t, []any{1.0, []any{[]any{"BlockRemoved", []any{"x"}}}})}},
		{"stored without hashes", [][]byte{nil, seqFrame(1), mustPack(t, []any{1.0, []any{[]any{"BlockStored"}}})}},
		{"negative token", [][]byte{nil, seqFrame(1), mustPack(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 16}}})}},
		{"NaN ts", [][]byte{nil, seqFrame(1), mustPack(t, []any{nan(), []any{}})}},
		{"map without events", [][]byte{nil, seqFrame(1), mustPack(t, map[string]any{"ts": 1.0})}},
		{"event map without type", [][]byte{nil, seqFrame(1), mustPack(t, []any{1.0, []any{map[string]any{"block_hashes": []any{1}}}})}},
		{"trailing bytes", [][]byte{nil, seqFrame(1), append(good, 0xc0)}},
		{"deep nesting in an unknown field", [][]byte{nil, seqFrame(1), append(mustPack(t, []any{1.0, []any{}})[:0:0], append([]byte{0x93, 0x01, 0x90}, bytes.Repeat([]byte{0x91}, 100000)...)...)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMessage(tc.frames)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func nan() float64 { z := 0.0; return z / z }

// FuzzParseMessage: any frames decode or fail with ErrMalformed, without
// panicking, and a decoded batch re-encodes to an equal one.
func FuzzParseMessage(f *testing.F) {
	f.Add([]byte("kv"), seqFrame(3), mustPack(f, []any{1.5, []any{[]any{"BlockStored", []any{7, 8}, nil, []any{1, 2}, 16, nil, "GPU"}, []any{"BlockRemoved", []any{sha}}, []any{"AllBlocksCleared"}}, 0}))
	f.Add([]byte(""), seqFrame(0), mustPack(f, map[string]any{"ts": 1.0, "events": []any{map[string]any{"type": "BlockRemoved", "block_hashes": []any{1}}}}))
	f.Add([]byte(""), seqFrame(0), []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, topic, seq, payload []byte) {
		b, err := ParseMessage([][]byte{topic, seq, payload})
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		n := 0
		for _, e := range b.Events {
			n += len(e.BlockHashes) + len(e.TokenIDs)
		}
		if n > len(payload) {
			t.Fatalf("%d hashes and tokens from a %d-byte payload", n, len(payload))
		}
	})
}

// TestDecodeAllocationIsBoundedByThePayload: hostile declared lengths cost
// no more than the payload they arrive in.
func TestDecodeAllocationIsBoundedByThePayload(t *testing.T) {
	payload := append([]byte{0x92, 0x01, 0x91, 0x92, 0xac}, "BlockRemoved"...)
	payload = append(payload, 0xdd, 0x7f, 0xff, 0xff, 0xff) // 2^31-1 hashes declared
	allocs := testing.AllocsPerRun(20, func() {
		if _, _, _, _, err := DecodeBatch(payload); err == nil {
			t.Fatal("decoded a truncated batch")
		}
	})
	if allocs > 40 {
		t.Fatalf("%v allocations for a %d-byte payload", allocs, len(payload))
	}
}
