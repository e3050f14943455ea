package workload

import (
	"fmt"
	"strconv"

	"github.com/switchyard-llm/switchyard/internal/hashkey"
)

// switchyardRow holds the fields a Switchyard trace adds to a Mooncake
// row; all nil in a Mooncake trace.
type switchyardRow struct {
	CachedTokens *int    `json:"cached_tokens"`
	AffinityHash *string `json:"affinity_hash"`
	Cluster      *string `json:"cluster"`
	Stream       *bool   `json:"stream"`
}

func (s switchyardRow) present() bool {
	return s.CachedTokens != nil || s.AffinityHash != nil || s.Cluster != nil || s.Stream != nil
}

// TraceBlockTokens is the prefix-block size of a Switchyard trace's
// synthesised blocks: the engine model's KV block, so a prefix the live
// engine cached is one the simulated engine can cache to the token.
const TraceBlockTokens = 16

// twinRow is what building a Switchyard row's prefix blocks needs.
type twinRow struct {
	index        int // in the reader's output
	line         int
	hash         uint64
	keyed        bool
	cached       int
	input, outpt int
}

// apply sets what a Switchyard row adds to req, the request of row line:
// cluster, streaming and the session (its affinity hash); it returns
// what switchyardBlocks needs to build the row's prefix blocks when the
// row has no hash_ids.
func (s switchyardRow) apply(req *Request, line int) (twinRow, error) {
	t := twinRow{line: line, input: req.PromptTokens, outpt: req.OutputTokens}
	if s.AffinityHash != nil && *s.AffinityHash != "" {
		var err error
		if t.hash, err = strconv.ParseUint(*s.AffinityHash, 16, 64); err != nil {
			return t, fmt.Errorf("affinity_hash %q is not 16 hex digits", *s.AffinityHash)
		}
		t.keyed = true
		req.Session = "ak" + *s.AffinityHash
	}
	if s.CachedTokens != nil {
		if t.cached = *s.CachedTokens; t.cached < 0 || t.cached > req.PromptTokens {
			return t, fmt.Errorf("cached_tokens %d not in [0, input_length]", t.cached)
		}
	}
	if s.Cluster != nil {
		req.Cluster = *s.Cluster
	}
	if s.Stream != nil {
		req.NonStreaming = !*s.Stream
	}
	return t, nil
}

// switchyardBlocks builds the prefix blocks (of bs tokens) of the
// Switchyard rows rows of out, which have no hash_ids, from what the
// routing events know: the conversation (affinity hash), the arrival
// order, the token counts and the tokens the live engine found cached.
//
//   - A turn whose conversation's next turn is at least its prompt plus
//     its answer long is continued by it (a chat's next prompt is the
//     history): its whole prompt is the conversation's chain, so the next
//     turn finds it where the engine still holds it.
//   - A turn continuing the previous one starts with that turn's prompt
//     and answer; the whole blocks of its cached tokens are the
//     conversation's chain too (shared with an earlier turn).
//   - A turn whose next turn found more of its prompt cached than the
//     rules above give (a client that cuts prompts to a budget sends the
//     same first tokens turn after turn, however long the history) wrote
//     those blocks: they are the conversation's chain in both. Live, one
//     bench/live run found 736k tokens cached against the twin's 534k
//     without this rule.
//   - The blocks a conversation's first turn found cached (a system
//     prompt other conversations share) are a root chain shared by every
//     conversation whose first turn found the same number cached.
//   - The rest is unique to the request; a request without an affinity
//     key is a conversation of its own.
//
// The live cached counts say what was shared, not where the simulator
// finds it: the simulated routing decides that.
func switchyardBlocks(out []Request, rows []twinRow, bs int) {
	type conv struct {
		root int // blocks of the first turn's cached tokens
		last int // index in rows of the previous turn, -1 none
	}
	convs := map[uint64]*conv{}
	cont := make([]bool, len(rows)) // rows[j] is continued by its next turn
	prev := make([]int, len(rows))  // rows[j]'s previous turn, -1 none
	// shared[j]: blocks of rows[j]'s prompt its next turn found cached
	shared := make([]int, len(rows))
	for j, t := range rows {
		prev[j] = -1
		if !t.keyed {
			continue
		}
		c := convs[t.hash]
		if c == nil {
			c = &conv{root: t.cached / bs, last: -1}
			convs[t.hash] = c
		}
		if c.last >= 0 {
			p := rows[c.last]
			prev[j] = c.last
			cont[c.last] = t.input >= p.input+p.outpt
			shared[c.last] = min(t.cached, p.input) / bs
		}
		c.last = j
	}
	for j, t := range rows {
		n := (t.input + bs - 1) / bs
		root := t.cached / bs
		if t.keyed {
			root = convs[t.hash].root
		}
		chain := max(t.cached/bs, shared[j])
		if cont[j] {
			chain = n
		} else if p := prev[j]; p >= 0 && cont[p] {
			chain = max(chain, (rows[p].input+rows[p].outpt)/bs)
		}
		if !t.keyed {
			chain = 0
		}
		blocks := make([]uint64, n)
		for k := range n {
			switch {
			case k < root:
				blocks[k] = hashkey.Mix(0x7e57ab1e ^ uint64(root)<<32 ^ uint64(k))
			case k < chain:
				blocks[k] = hashkey.Mix(hashkey.Mix(t.hash^0x5157a7d) + uint64(k))
			default:
				blocks[k] = hashkey.Mix(uint64(t.line)<<20|uint64(k)) | 1<<63
			}
		}
		out[t.index].Blocks = blocks
	}
}
