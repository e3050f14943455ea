package policy

import (
	"testing"

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

// TestGatewayChain: blocks finer than the gateway's are grouped into
// blocks of about 64 tokens, each the chain hash at its group's end (so
// two prompts share a grouped block exactly when they share its whole
// group); coarser blocks are kept.
func TestGatewayChain(t *testing.T) {
	a := &des.Request{W: &workload.Request{Blocks: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}}
	b := &des.Request{W: &workload.Request{Blocks: []uint64{1, 2, 3, 4, 5, 6, 7, 99, 9, 10}}}
	full := chainHashes(nil, a)
	got, bt := gatewayChain(nil, a, 16)
	if bt != 64 || len(got) != 2 || got[0] != full[3] || got[1] != full[7] {
		t.Fatalf("16-token blocks: %v of %d tokens, want hashes 4 and 8 of %v as 64-token blocks", got, bt, full)
	}
	other, _ := gatewayChain(nil, b, 16)
	if other[0] != got[0] || other[1] == got[1] {
		t.Fatalf("prompts differing in block 8 share grouped blocks %v and %v", got, other)
	}
	for _, size := range []int{64, 512} {
		if kept, bt := gatewayChain(nil, a, size); bt != size || len(kept) != len(full) || kept[9] != full[9] {
			t.Errorf("%d-token blocks: %d hashes of %d tokens, want the trace's own", size, len(kept), bt)
		}
	}
}
