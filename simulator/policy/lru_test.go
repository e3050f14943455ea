package policy

import (
	"slices"
	"testing"

	"github.com/switchyard-llm/switchyard/gateway/pick"

	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/workload"
)

func TestLRUSetMatchesLeadingPrefixAndEvictsOldest(t *testing.T) {
	s := newLRUSet(4)
	s.insert([]uint64{1, 2, 3}, 1)
	tests := []struct {
		chain []uint64
		want  int
	}{
		{[]uint64{1, 2, 3, 4}, 3},
		{[]uint64{1, 2, 9}, 2},
		{[]uint64{9, 1, 2}, 0},
		{nil, 0},
	}
	for _, tc := range tests {
		if got := s.match(tc.chain); got != tc.want {
			t.Errorf("match(%v) = %d, want %d", tc.chain, got, tc.want)
		}
	}
	// Over twice the capacity the oldest entries go, down to capacity.
	s.insert([]uint64{10, 11, 12, 13, 14, 15}, 2)
	if s.len() != 4 {
		t.Fatalf("len %d after eviction, want 4", s.len())
	}
	if s.match([]uint64{1}) != 0 || s.match([]uint64{10, 11}) != 2 {
		t.Fatal("eviction kept old entries or dropped new ones")
	}
}

// TestGatewayChain: a workload's blocks become the live gateway's
// ~64-token blocks: finer ones grouped (each grouped block the chain hash
// at its group's end), coarser ones split (the parts of a shared block
// shared, a trailing partial part not hashed), at most
// pick.MaxPromptBlocks of them.
func TestGatewayChain(t *testing.T) {
	a := &des.Request{W: &workload.Request{PromptTokens: 160, Blocks: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}}
	b := &des.Request{W: &workload.Request{PromptTokens: 160, Blocks: []uint64{1, 2, 3, 4, 5, 6, 7, 99, 9, 10}}}
	full := chainHashes(nil, a)
	got, bt := gatewayChain(nil, a, 16)
	if bt != 64 || len(got) != 2 || got[0] != full[3] || got[1] != full[7] {
		t.Fatalf("16-token blocks: %v of %d tokens, want hashes 4 and 8 of %v as 64-token blocks", got, bt, full)
	}
	other, _ := gatewayChain(nil, b, 16)
	if other[0] != got[0] || other[1] == got[1] {
		t.Fatalf("prompts differing in block 8 share grouped blocks %v and %v", got, other)
	}
	if kept, bt := gatewayChain(nil, a, 64); bt != 64 || len(kept) != len(full) || kept[9] != full[9] {
		t.Errorf("64-token blocks: %d hashes of %d tokens, want the workload's own", len(kept), bt)
	}

	// 512-token blocks: 1,000 tokens are one whole block and 488 tokens,
	// seven whole parts, of the second: 15 parts of 64 tokens.
	c := &des.Request{W: &workload.Request{PromptTokens: 1000, Blocks: []uint64{1, 2}}}
	d := &des.Request{W: &workload.Request{PromptTokens: 1000, Blocks: []uint64{1, 3}}}
	split, bt := gatewayChain(nil, c, 512)
	splitD, _ := gatewayChain(nil, d, 512)
	if bt != 64 || len(split) != 15 || !slices.Equal(split[:8], splitD[:8]) || split[8] == splitD[8] {
		t.Fatalf("512-token blocks: %d parts of %d tokens; shared first block's parts equal: %v", len(split), bt, slices.Equal(split[:8], splitD[:8]))
	}
	long := &des.Request{W: &workload.Request{PromptTokens: 512 * 300, Blocks: make([]uint64, 300)}}
	if capped, _ := gatewayChain(nil, long, 512); len(capped) != pick.MaxPromptBlocks {
		t.Errorf("a 153,600-token prompt: %d blocks, want the cap %d", len(capped), pick.MaxPromptBlocks)
	}
}
