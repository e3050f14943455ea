package workload

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/switchyard-llm/switchyard/gateway/pick"
)

// TraceRow is one request of a Switchyard trace, the file `switchyard
// export-trace` writes from the routing events of a time range: Mooncake
// JSONL's fields (so ReadMooncake and `switchyard sim --trace` read it)
// without hash_ids, plus what the routing events know.
type TraceRow struct {
	// Timestamp is the arrival, in ms since the start of the exported
	// range.
	Timestamp    int64 `json:"timestamp"`
	InputLength  int   `json:"input_length"`
	OutputLength int   `json:"output_length"`
	// CachedTokens of the prompt were served from the engine's prefix
	// cache in the live run.
	CachedTokens int `json:"cached_tokens"`
	// AffinityHash is the 64-bit hash of the request's affinity key
	// (session, user or prompt prefix) as 16 hex digits; requests with
	// the same hash are one conversation. Never the raw key.
	AffinityHash string `json:"affinity_hash"`
	// Cluster is the gateway cluster the request entered.
	Cluster string `json:"cluster"`
	// Stream is false for a request that asked for the whole response at
	// once.
	Stream bool `json:"stream"`
}

// WriteTraceRow writes r as one JSON line.
func WriteTraceRow(w io.Writer, r TraceRow) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding trace row: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

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

// apply sets what a Switchyard row adds to req, the request of row line:
// cluster, streaming, the session (its affinity hash) and, when the row
// has no hash_ids, prefix blocks of DefaultBlockTokens: the whole blocks
// of its cached tokens are a chain derived from the affinity hash (the
// conversation's reusable prefix; requests without a key share the chain
// of hash 0), the rest are unique to the row.
func (s switchyardRow) apply(req *Request, line int) error {
	var h uint64
	if s.AffinityHash != nil && *s.AffinityHash != "" {
		var err error
		if h, err = strconv.ParseUint(*s.AffinityHash, 16, 64); err != nil {
			return fmt.Errorf("affinity_hash %q is not 16 hex digits", *s.AffinityHash)
		}
		req.Session = "ak" + *s.AffinityHash
	}
	cached := 0
	if s.CachedTokens != nil {
		if cached = *s.CachedTokens; cached < 0 || cached > req.PromptTokens {
			return fmt.Errorf("cached_tokens %d not in [0, input_length]", cached)
		}
	}
	if s.Cluster != nil {
		req.Cluster = *s.Cluster
	}
	if s.Stream != nil {
		req.NonStreaming = !*s.Stream
	}
	if len(req.Blocks) > 0 {
		return nil
	}
	n := (req.PromptTokens + DefaultBlockTokens - 1) / DefaultBlockTokens
	shared := cached / DefaultBlockTokens
	b := pick.Mix(h ^ 0x5157a7d)
	for k := range n {
		if k < shared {
			req.Blocks = append(req.Blocks, b)
			b = pick.Mix(b + uint64(k) + 1)
			continue
		}
		req.Blocks = append(req.Blocks, pick.Mix(uint64(line)<<20|uint64(k))|1<<63)
	}
	return nil
}
