package workload

import (
	"strings"
	"testing"
)

// TestSwitchyardTraceTurnsShareTheirHistory: in an exported trace, a turn
// whose next turn is its prompt plus answer long is a prefix of it, so a
// simulated engine can find the whole previous prompt cached (live it hit
// 81%, with whole 512-token blocks of cached tokens the simulator found 32%).
func TestSwitchyardTraceTurnsShareTheirHistory(t *testing.T) {
	trace := `{"timestamp":0,"input_length":320,"output_length":40,"cached_tokens":256,"affinity_hash":"00000000000000aa","cluster":"a","stream":true}
{"timestamp":10,"input_length":300,"output_length":40,"cached_tokens":256,"affinity_hash":"00000000000000bb","cluster":"a","stream":true}
{"timestamp":1000,"input_length":480,"output_length":40,"cached_tokens":0,"affinity_hash":"00000000000000aa","cluster":"a","stream":true}
`
	reqs, rep, err := ReadMooncake(strings.NewReader(trace), true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.BlockTokens != TraceBlockTokens {
		t.Fatalf("block tokens %d", rep.BlockTokens)
	}
	a1, b1, a2 := reqs[0].Blocks, reqs[1].Blocks, reqs[2].Blocks
	if len(a1) != 20 || len(a2) != 30 {
		t.Fatalf("blocks %d %d", len(a1), len(a2))
	}
	for k := range a1 {
		if a1[k] != a2[k] {
			t.Fatalf("turn 2 block %d differs from turn 1's: the history is not shared", k)
		}
	}
	for k := range 16 { // the 256 cached tokens of both first turns
		if a1[k] != b1[k] {
			t.Fatalf("first turns differ at block %d of their shared cached prefix", k)
		}
	}
	if a1[16] == b1[16] {
		t.Fatal("two conversations share blocks beyond their first turns' cached prefix")
	}
}
