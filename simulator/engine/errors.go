package engine

import "errors"

// Sentinel errors; match with errors.Is.
var (
	// ErrInvalidConfig marks a Config or Preset that cannot drive a model.
	ErrInvalidConfig = errors.New("invalid engine config")
	// ErrUnknownPreset marks a GPU class with no built-in preset.
	ErrUnknownPreset = errors.New("unknown gpu class")
	// ErrInvalidRequest marks a request with non-positive token counts.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrTooLong marks a request longer than the model's context or the
	// KV cache of a replica.
	ErrTooLong = errors.New("request too long")
	// ErrQueueFull marks a request refused because the waiting queue of
	// every replica is at Config.MaxWaiting.
	ErrQueueFull = errors.New("waiting queue full")
	// ErrDuplicateID marks a request whose ID is already in the engine.
	ErrDuplicateID = errors.New("duplicate request id")
)
