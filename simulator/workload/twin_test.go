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

// TestSwitchyardTraceTurnsShareWhatTheNextFoundCached: a client that cuts
// prompts to a token budget sends the same first tokens turn after turn,
// so a turn is no prefix of its next by length (8,198 tokens twice, the
// answer cut off), yet the next turn found 8,192 of them cached live. Its
// blocks must be the previous turn's, or the twin finds none of them
// (bench/live: 534k cached tokens in the twin against 736k live).
func TestSwitchyardTraceTurnsShareWhatTheNextFoundCached(t *testing.T) {
	trace := `{"timestamp":0,"input_length":8198,"output_length":128,"cached_tokens":512,"affinity_hash":"00000000000000aa","cluster":"a","stream":true}
{"timestamp":10,"input_length":8198,"output_length":128,"cached_tokens":512,"affinity_hash":"00000000000000bb","cluster":"a","stream":true}
{"timestamp":5000,"input_length":8198,"output_length":128,"cached_tokens":8192,"affinity_hash":"00000000000000aa","cluster":"a","stream":true}
`
	reqs, _, err := ReadMooncake(strings.NewReader(trace), true)
	if err != nil {
		t.Fatal(err)
	}
	a1, b1, a2 := reqs[0].Blocks, reqs[1].Blocks, reqs[2].Blocks
	for k := range 8192 / TraceBlockTokens {
		if a1[k] != a2[k] {
			t.Fatalf("turn 2 block %d differs from turn 1's: the %d tokens it found cached are not shared", k, 8192)
		}
	}
	if a1[512] == a2[512] {
		t.Fatal("the turns share the block past what turn 2 found cached")
	}
	if a1[32] == b1[32] {
		t.Fatal("another conversation shares blocks past the first turns' cached prefix")
	}
}
