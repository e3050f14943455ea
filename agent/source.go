package agent

import "github.com/switchyard-llm/switchyard/schemas"

// Values of EngineSignal.max_batch_source: where max_batch came from.
const (
	// maxBatchConfigured: the agent's engine list (Target.MaxBatch).
	maxBatchConfigured = "configured"
	// maxBatchEngineMetrics: a limit the engine's /metrics state.
	maxBatchEngineMetrics = "engine_metrics"
)

// setMaxBatchSource records where sig's max_batch came from.
func setMaxBatchSource(sig *schemas.EngineSignal, source string) { sig.MaxBatchSource = source }
