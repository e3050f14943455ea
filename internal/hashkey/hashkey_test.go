package hashkey

import "testing"

// TestValuesAreStable pins the hash: affinity keys, Maglev tables and the
// simulator's golden outputs depend on these exact values, so a change
// here is a change of every placement.
func TestValuesAreStable(t *testing.T) {
	for _, c := range []struct {
		got, want uint64
	}{
		{Mix(0), 0},
		{Mix(1), 0x5692161d100b05e5},
		{String(""), Mix(offset64)},
		{String("s:alice"), Bytes([]byte("s:alice"))},
		{Seeded("e1", 0), String("e1")},
	} {
		if c.got != c.want {
			t.Errorf("got %#x, want %#x", c.got, c.want)
		}
	}
	if Seeded("e1", 1) == String("e1") {
		t.Error("the seed changes nothing")
	}
}
