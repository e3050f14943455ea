// Package engine is a deterministic, clock-free model of a continuous-batching
// LLM inference engine (vLLM-style iteration-level scheduling), so that the
// real-time enginesim server and the discrete-event simulator run the same
// model on different clocks.
//
// The caller owns time. Submit, Cancel and Advance take the current virtual
// time; NextEvent says when the model next has something to report, and
// Advance(t) runs every engine step that ends at or before t and returns the
// events they produced, in time order. There are no goroutines and no wall
// clock here, and an Engine is not safe for concurrent use.
//
// # Model
//
// An engine has one or more replicas; a request goes to the replica with the
// fewest running plus waiting requests (ties to the lowest index). Each
// replica repeats steps (forward passes) while it has work. A step's token
// budget is Preset.MaxBatchedTokens: every decoding sequence takes one token,
// the rest goes to prefill chunks, first for sequences already prefilling,
// then for waiting requests admitted in FIFO order while fewer than
// Preset.MaxSeqs run and the KV cache has room for the whole request
// (prompt plus output blocks, so there is never preemption). The head of the
// queue blocks the ones behind it. A step lasts
//
//	StepBase + StepPerSeq*seqs + StepPerContextToken*ctx + prefill/PrefillTokensPerSec
//
// where seqs counts the sequences in the step, ctx the context tokens of the
// decoding ones and prefill the prefill tokens, times Config.LatencyMultiplier
// (1 unless the engine is made slower than its class). A sequence whose prefill
// completes in a step emits its first token at the end of that step; a
// decoding sequence emits one token per step.
//
// The KV cache holds Preset.KVBlocks blocks of Preset.BlockSize tokens. A
// request carries the hashes of its prompt's full blocks (each hash covering
// the whole prefix up to the end of its block); on admission its leading
// cached blocks are reused and only the remaining prompt tokens are
// prefilled (at least one token is always computed). When prefill completes
// the request's new full blocks are published to the cache; when it
// finishes, they stay cached in an LRU until their space is needed.
package engine
