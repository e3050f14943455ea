package schemas

// Bounds of EngineSignal's model lists: the agent publishes within them
// and the processor dead-letters a signal beyond them.
const (
	// MaxSignalModels bounds the ids of models and of active_adapters.
	MaxSignalModels = 256
	// MaxModelIDBytes bounds one model or adapter id.
	MaxModelIDBytes = 256
	// MaxSignalMaxLoRA bounds max_lora.
	MaxSignalMaxLoRA = 1 << 16
)
