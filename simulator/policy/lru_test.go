package policy

import "testing"

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
