package engineserver

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-llm/switchyard/simulator/engine"
)

// Defaults of Config fields left zero.
const (
	DefaultListen    = "127.0.0.1:8000"
	DefaultID        = "enginesim"
	DefaultGPUClass  = "h100"
	DefaultModel     = "switchyard-sim-8b"
	DefaultMaxTokens = 64
)

// Metric sets /metrics can expose (Config.Metrics).
const (
	// MetricsFull is vLLM's metrics plus enginesim's own: the batch limit
	// (switchyard_enginesim_max_num_seqs), replicas, identity, rejected and
	// canceled requests.
	MetricsFull = "full"
	// MetricsVLLM is only what vLLM itself exposes, by vLLM's names: no
	// batch limit, no replica count, nothing enginesim-specific.
	MetricsVLLM = "vllm"
)

// ErrInvalidConfig marks a Config that New refuses.
var ErrInvalidConfig = errors.New("invalid enginesim config")

// Config configures a Service.
type Config struct {
	// ID names the engine in logs and in switchyard_enginesim_info
	// (default "enginesim").
	ID string
	// Listen is the address Run listens on (default 127.0.0.1:8000; port 0
	// picks a free one, see Addr).
	Listen string
	// GPUClass selects the engine preset: "h100" (default), "a100", "l4".
	GPUClass string
	// Model is the served model name (default "switchyard-sim-8b").
	Model string
	// Replicas is the number of engine replicas behind the endpoint
	// (default 1).
	Replicas int
	// Seed makes the generated text and the injected faults reproducible.
	Seed int64
	// TimeScale runs the engine model that many times faster than real
	// time (default 1; e.g. 10 makes every step a tenth as long). Latency
	// metrics are in real time.
	TimeScale float64
	// DefaultMaxTokens is the output length when a request sets neither
	// max_tokens nor max_completion_tokens (default 64).
	DefaultMaxTokens int
	// Metrics is the set of metrics /metrics serves: MetricsFull (default)
	// or MetricsVLLM.
	Metrics string
	// LatencyMultiplier makes prefill and decode that many times slower
	// than the GPU class's preset (its step costs multiplied, its prefill
	// rate divided), e.g. 6 for a slow engine declared with the same GPU
	// class as fast ones. Default 1; must be in [0.01, 1000].
	LatencyMultiplier float64
	// MaxNumSeqs is the most requests one replica runs at once (vLLM's
	// --max-num-seqs); 0 keeps the GPU class preset's. At most 65,536 and
	// below the preset's step token budget.
	MaxNumSeqs int
	// KVBlocks is one replica's KV-cache capacity in blocks of the
	// preset's block size (vLLM's num_gpu_blocks); 0 keeps the preset's.
	// At most 1<<24.
	KVBlocks int
	// LoRAModules are the LoRA adapters the engine serves besides Model
	// (vLLM's --lora-modules): a request naming one runs with it, and
	// /v1/models lists each with Model as its parent.
	LoRAModules []string
	// MaxLoRAs is the most adapters one replica's batch holds at once
	// (vLLM's --max-loras; default 1 when LoRAModules are given).
	MaxLoRAs int
	// LoRALoad is the time loading an adapter onto the GPU adds to a step
	// (default engine.DefaultLoRALoad).
	LoRALoad time.Duration
	// KVEvents publishes the prefix cache's changes as vLLM's KV events
	// over ZMQ; off unless KVEvents.Endpoint is set.
	KVEvents KVEvents
	// Logger receives diagnostics (default: discarded).
	Logger *slog.Logger
	// Registerer, when set, also receives the engine's metrics with an
	// extra "engine" label set to ID. /metrics always serves them from the
	// Service's own registry.
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.ID == "" {
		c.ID = DefaultID
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.GPUClass == "" {
		c.GPUClass = DefaultGPUClass
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.TimeScale == 0 {
		c.TimeScale = 1
	}
	if c.DefaultMaxTokens == 0 {
		c.DefaultMaxTokens = DefaultMaxTokens
	}
	if c.Metrics == "" {
		c.Metrics = MetricsFull
	}
	if c.LatencyMultiplier == 0 {
		c.LatencyMultiplier = 1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if len(c.LoRAModules) > 0 && c.MaxLoRAs == 0 {
		c.MaxLoRAs = 1
	}
	c.KVEvents.setDefaults()
}

// Bounds of Config.LoRAModules.
const (
	maxLoRAModules = 1 << 12
	maxLoRAName    = 256
)

// validateLoRA checks the adapters: unique names of 1-256 bytes of UTF-8,
// none the base model's, and MaxLoRAs in [1, 65536] when there are any.
func (c *Config) validateLoRA() error {
	if len(c.LoRAModules) > maxLoRAModules {
		return fmt.Errorf("%w: at most %d LoRA modules, got %d", ErrInvalidConfig, maxLoRAModules, len(c.LoRAModules))
	}
	seen := map[string]bool{c.Model: true}
	for _, n := range c.LoRAModules {
		if n == "" || len(n) > maxLoRAName || !utf8.ValidString(n) || seen[n] {
			return fmt.Errorf("%w: LoRA module %q: want a unique name of 1-%d bytes of UTF-8, not the model's", ErrInvalidConfig, n, maxLoRAName)
		}
		seen[n] = true
	}
	if c.MaxLoRAs < 0 || c.MaxLoRAs > 1<<16 || c.LoRALoad < 0 || (len(c.LoRAModules) > 0 && c.MaxLoRAs == 0) {
		return fmt.Errorf("%w: max LoRAs must be in [1, 65536] with LoRA modules and the load time non-negative, got %d and %v", ErrInvalidConfig, c.MaxLoRAs, c.LoRALoad)
	}
	return nil
}

// Upper bounds of Config.MaxNumSeqs and Config.KVBlocks.
const (
	maxMaxNumSeqs = 1 << 16
	maxKVBlocks   = 1 << 24
)

// validate checks a defaulted config and returns its engine preset,
// slowed down by LatencyMultiplier, with MaxNumSeqs and KVBlocks applied.
func (c *Config) validate() (engine.Preset, error) {
	p, err := engine.LookupPreset(c.GPUClass)
	if err != nil {
		return p, fmt.Errorf("%w: gpu class: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.Metrics != MetricsFull && c.Metrics != MetricsVLLM:
		return p, fmt.Errorf("%w: metrics must be %q or %q, got %q", ErrInvalidConfig, MetricsFull, MetricsVLLM, c.Metrics)
	case math.IsNaN(c.LatencyMultiplier) || c.LatencyMultiplier < 0.01 || c.LatencyMultiplier > 1000:
		return p, fmt.Errorf("%w: latency multiplier must be in [0.01, 1000], got %v", ErrInvalidConfig, c.LatencyMultiplier)
	}
	p = slower(p, c.LatencyMultiplier)
	switch {
	case c.MaxNumSeqs < 0 || c.MaxNumSeqs > maxMaxNumSeqs:
		return p, fmt.Errorf("%w: max num seqs must be in [0, %d], got %d", ErrInvalidConfig, maxMaxNumSeqs, c.MaxNumSeqs)
	case c.MaxNumSeqs >= p.MaxBatchedTokens:
		return p, fmt.Errorf("%w: max num seqs must be below the %s preset's step token budget %d, got %d", ErrInvalidConfig, p.Name, p.MaxBatchedTokens, c.MaxNumSeqs)
	case c.KVBlocks < 0 || c.KVBlocks > maxKVBlocks:
		return p, fmt.Errorf("%w: kv blocks must be in [0, %d], got %d", ErrInvalidConfig, maxKVBlocks, c.KVBlocks)
	}
	if c.MaxNumSeqs > 0 {
		p.MaxSeqs = c.MaxNumSeqs
	}
	if c.KVBlocks > 0 {
		p.KVBlocks = c.KVBlocks
	}
	switch {
	case !utf8.ValidString(c.ID) || !utf8.ValidString(c.Model):
		return p, fmt.Errorf("%w: id and model must be valid UTF-8", ErrInvalidConfig)
	case c.Replicas < 1 || c.Replicas > 1024:
		return p, fmt.Errorf("%w: replicas must be in [1, 1024], got %d", ErrInvalidConfig, c.Replicas)
	case math.IsNaN(c.TimeScale) || c.TimeScale < 0.001 || c.TimeScale > 1e6:
		return p, fmt.Errorf("%w: time scale must be in [0.001, 1e6], got %v", ErrInvalidConfig, c.TimeScale)
	case c.DefaultMaxTokens < 1 || c.DefaultMaxTokens >= p.MaxModelLen:
		return p, fmt.Errorf("%w: default max tokens must be in [1, %d), got %d", ErrInvalidConfig, p.MaxModelLen, c.DefaultMaxTokens)
	}
	if err := c.KVEvents.validate(); err != nil {
		return p, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return p, c.validateLoRA()
}

// slower returns p with every step cost multiplied and the prefill rate
// divided by m, so that prefill and decode both take m times as long.
func slower(p engine.Preset, m float64) engine.Preset {
	if m == 1 {
		return p
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(math.Round(float64(d) * m)) }
	p.PrefillTokensPerSec /= m
	p.StepBase = scale(p.StepBase)
	p.StepPerSeq = scale(p.StepPerSeq)
	p.StepPerContextToken = scale(p.StepPerContextToken)
	return p
}
