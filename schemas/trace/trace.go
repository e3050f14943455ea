// Package trace is the row of a Switchyard trace, the JSON-lines file
// `switchyard export-trace` writes (streams/replay) and `switchyard sim
// --trace` reads (simulator/workload): the format both sides share, below
// either of them.
package trace

import (
	"encoding/json"
	"fmt"
	"io"
)

// Row is one request of a Switchyard trace, the file `switchyard
// export-trace` writes from the routing events of a time range: Mooncake
// JSONL's fields (so workload.ReadMooncake and `switchyard sim --trace`
// read it) without hash_ids, plus what the routing events know.
type Row struct {
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
	// EngineID and TTFTms are what the live run observed: the engine of
	// the last attempt and the time to first token at the gateway (0 when
	// not streamed). The simulator reads neither; they are what a twin's
	// per-request outcomes (`switchyard sim --requests`) are compared
	// with.
	EngineID string  `json:"engine_id"`
	TTFTms   float64 `json:"ttft_ms"`
}

// WriteRow writes r as one JSON line.
func WriteRow(w io.Writer, r Row) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding trace row: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}
