package des

import (
	"time"

	"github.com/switchyard-llm/switchyard/simulator/engine"
	"github.com/switchyard-llm/switchyard/simulator/workload"
)

// Policy routes requests. The simulator calls it from one goroutine, in
// virtual-time order.
//
// Contract: Pick returns the index of an engine not in exclude — one
// World.Healthy reports up, unless the policy deliberately falls back to
// any engine (an attempt to a down engine fails and is retried) — or -1
// to shed the request, or Held to decide later: the policy then calls
// World.Dispatch (an engine, as if Pick had returned it then) or
// World.Reject (as if Pick had returned -1 then) exactly once for the
// request, from one of its callbacks (Done, Tick, FirstToken), at that
// callback's virtual time; a request still held when the run ends
// counts as failed. Every non-negative Pick and every Dispatch is
// matched by exactly one Done for that engine when the attempt ends
// (finished, failed or refused), so in-flight counts balance. Tick is
// called every control tick with the current time.
type Policy interface {
	Pick(now time.Duration, r *Request, exclude []int32) int
	Done(now time.Duration, r *Request, engine int, o Outcome)
	Tick(now time.Duration)
}

// Held is Pick's answer for a request the policy neither places nor
// sheds yet, as a gateway's admission queue holds one until an engine
// slot frees (see Policy).
const Held = -2

// FirstTokenObserver is implemented by policies that observe each
// attempt's first token when the engine produces it, as an engine's TTFT
// histogram does (Done comes only when the attempt ends). engineTTFT is
// the engine's own time to first token.
type FirstTokenObserver interface {
	FirstToken(now time.Duration, r *Request, engine int, engineTTFT time.Duration)
}

// Weighted is implemented by policies that publish routing weights
// (switchyard, legacy-irb). Weights returns the current weights per
// cluster and engine and a version that changes whenever they do; the
// simulator samples it at every tick to count weight reversals.
type Weighted interface {
	Weights() (version uint64, w [][]float64)
}

// Request is one request as a policy sees it.
type Request struct {
	// Index is the request's position in the workload.
	Index int
	// Cluster is the index of the cluster the request entered.
	Cluster int
	// Key is the affinity key: a hash of the session, which the gateway
	// reads from the session header or the OpenAI user field.
	Key uint64
	// W is the workload request (read only).
	W *workload.Request
	// Attempt counts attempts, from 1.
	Attempt int
}

// Outcome is what the gateway observed for one attempt.
type Outcome struct {
	OK bool
	// Retry: the attempt failed and the gateway tries the request again
	// (on another engine, or fails it there when none is left: Pick then
	// sees the next attempt). A gateway that reports once per request, as
	// Switchyard's does, reports on the request's last attempt only.
	Retry bool
	// TTFT and E2E are as seen at the gateway (network included);
	// EngineTTFT is the engine's own. A non-streaming response
	// (W.NonStreaming) reaches the gateway whole, so its TTFT equals
	// its E2E: the gateway cannot observe the first token.
	TTFT, E2E, EngineTTFT time.Duration
	// MeanTBOT is the engine's mean time between output tokens.
	MeanTBOT                                 time.Duration
	PromptTokens, OutputTokens, CachedTokens int
}

// EngineInfo is the static description of an engine, as its operator
// declared it: an engine made slower than its class (the scenario's
// latency_multiplier) still shows its class's preset here.
type EngineInfo struct {
	ID, Region, GPU string
	Preset          engine.Preset
	Replicas        int
	// MaxBatchHidden: the engine does not export its batch limit (the
	// scenario's report_max_batch: false), as vLLM does not.
	MaxBatchHidden bool
}

// ReportedMaxBatch is the batch limit (max running sequences per
// replica) the engine's metrics export: the preset's, or 0 when the
// engine hides it.
func (e EngineInfo) ReportedMaxBatch() int {
	if e.MaxBatchHidden {
		return 0
	}
	return e.Preset.MaxSeqs
}

// ClusterInfo is the static description of a gateway cluster.
type ClusterInfo struct {
	ID, Region string
}
