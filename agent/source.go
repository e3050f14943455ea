package agent

import "github.com/switchyard-llm/switchyard/schemas"

// Where a signal's max_batch came from.
const (
	// maxBatchConfigured: the agent's engine list (Target.MaxBatch).
	maxBatchConfigured = "configured"
	// maxBatchEngineMetrics: a limit the engine's /metrics state.
	maxBatchEngineMetrics = "engine_metrics"
)

// setMaxBatchSource records where sig's max_batch came from. EngineSignal
// has no field for it in this schema version, so the source is only
// documented (docs/agent.md): a configured limit always wins over one the
// engine states.
func setMaxBatchSource(_ *schemas.EngineSignal, _ string) {}
