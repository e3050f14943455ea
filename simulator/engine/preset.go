package engine

import (
	"fmt"
	"time"
)

// Preset describes one replica of an engine on one GPU class: how fast it
// prefills, how long a decode step takes, and how much it can hold. The
// numbers are for an 8B-parameter model in 16-bit weights (Llama-3-8B
// class, 128 KiB of KV cache per token) and are realistic only roughly.
type Preset struct {
	// Name is the GPU class ("h100", "a100", "l4").
	Name string
	// PrefillTokensPerSec is the rate at which uncached prompt tokens are
	// computed. Each prefill token adds 1/PrefillTokensPerSec to its step.
	PrefillTokensPerSec float64
	// StepBase is the fixed cost of one forward pass (weights read once).
	StepBase time.Duration
	// StepPerSeq is added to a step for every sequence in it.
	StepPerSeq time.Duration
	// StepPerContextToken is added to a step for every context token a
	// decoding sequence attends over (KV cache reads).
	StepPerContextToken time.Duration
	// MaxSeqs is the maximum number of sequences running at once (the
	// batch, vLLM's max_num_seqs).
	MaxSeqs int
	// MaxBatchedTokens is the token budget of one step (vLLM's
	// max_num_batched_tokens): one per decoding sequence, the rest goes to
	// prefill chunks. It bounds how long a prefill chunk stalls the
	// decoding sequences of its step (about 200-300 ms in the presets).
	MaxBatchedTokens int
	// BlockSize is the number of tokens per KV-cache block.
	BlockSize int
	// KVBlocks is the KV-cache capacity in blocks.
	KVBlocks int
	// MaxModelLen bounds prompt plus output tokens of one request.
	MaxModelLen int
}

// presets is returned by copy from Presets and LookupPreset; never mutated.
func presets() []Preset {
	return []Preset{
		{
			// H100 80GB SXM: ~3.35 TB/s HBM, ~60 GB left for KV cache.
			Name:                "h100",
			PrefillTokensPerSec: 20000,
			StepBase:            12 * time.Millisecond,
			StepPerSeq:          50 * time.Microsecond,
			StepPerContextToken: 40 * time.Nanosecond,
			MaxSeqs:             256,
			MaxBatchedTokens:    4096,
			BlockSize:           16,
			KVBlocks:            24000,
			MaxModelLen:         32768,
		},
		{
			// A100 40GB: ~1.5 TB/s HBM, ~18 GB left for KV cache.
			Name:                "a100",
			PrefillTokensPerSec: 11000,
			StepBase:            18 * time.Millisecond,
			StepPerSeq:          80 * time.Microsecond,
			StepPerContextToken: 65 * time.Nanosecond,
			MaxSeqs:             128,
			MaxBatchedTokens:    2048,
			BlockSize:           16,
			KVBlocks:            9000,
			MaxModelLen:         32768,
		},
		{
			// L4 24GB: ~300 GB/s GDDR6, ~5 GB left for KV cache.
			Name:                "l4",
			PrefillTokensPerSec: 3500,
			StepBase:            45 * time.Millisecond,
			StepPerSeq:          150 * time.Microsecond,
			StepPerContextToken: 400 * time.Nanosecond,
			MaxSeqs:             48,
			MaxBatchedTokens:    1024,
			BlockSize:           16,
			KVBlocks:            2400,
			MaxModelLen:         16384,
		},
	}
}

// Presets returns the built-in GPU classes, fastest first.
func Presets() []Preset { return presets() }

// LookupPreset returns the built-in preset named name, or an error
// wrapping ErrUnknownPreset.
func LookupPreset(name string) (Preset, error) {
	for _, p := range presets() {
		if p.Name == name {
			return p, nil
		}
	}
	return Preset{}, fmt.Errorf("%w: %q (known: h100, a100, l4)", ErrUnknownPreset, name)
}

// Validate reports the first field of p that cannot drive a model.
func (p Preset) Validate() error {
	switch {
	case !(p.PrefillTokensPerSec > 0) || p.PrefillTokensPerSec > 1e12:
		return fmt.Errorf("%w: prefill tokens per second must be in (0, 1e12], got %v", ErrInvalidConfig, p.PrefillTokensPerSec)
	case p.StepBase <= 0:
		return fmt.Errorf("%w: step base must be positive, got %v", ErrInvalidConfig, p.StepBase)
	case p.StepPerSeq < 0:
		return fmt.Errorf("%w: step per seq must not be negative, got %v", ErrInvalidConfig, p.StepPerSeq)
	case p.StepPerContextToken < 0:
		return fmt.Errorf("%w: step per context token must not be negative, got %v", ErrInvalidConfig, p.StepPerContextToken)
	case p.MaxSeqs < 1:
		return fmt.Errorf("%w: max seqs must be at least 1, got %d", ErrInvalidConfig, p.MaxSeqs)
	case p.MaxBatchedTokens <= p.MaxSeqs:
		return fmt.Errorf("%w: max batched tokens (%d) must exceed max seqs (%d)", ErrInvalidConfig, p.MaxBatchedTokens, p.MaxSeqs)
	case p.BlockSize < 1:
		return fmt.Errorf("%w: block size must be at least 1, got %d", ErrInvalidConfig, p.BlockSize)
	case p.KVBlocks < 1:
		return fmt.Errorf("%w: kv blocks must be at least 1, got %d", ErrInvalidConfig, p.KVBlocks)
	case p.MaxModelLen < 2:
		return fmt.Errorf("%w: max model len must be at least 2, got %d", ErrInvalidConfig, p.MaxModelLen)
	}
	return nil
}
