// Package enginesim is the `switchyard enginesim` command: it parses
// flags and serves one simulated engine (simulator/engineserver; see
// docs/enginesim.md).
package enginesim

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/simulator/engineserver"
)

// Command returns `switchyard enginesim`: one simulated engine endpoint.
func Command() cli.Command {
	return cli.Command{
		Name:    "enginesim",
		Summary: "serve a simulated LLM engine (OpenAI API, vLLM metrics)",
		Run:     run,
	}
}

func run(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("enginesim", flag.ContinueOnError)
	var cfg engineserver.Config
	var conn cli.Connection
	fs.StringVar(&cfg.Listen, "listen", engineserver.DefaultListen, "address to serve the OpenAI API and /metrics on")
	fs.StringVar(&cfg.ID, "id", engineserver.DefaultID, "engine id (logs and switchyard_enginesim_info)")
	fs.StringVar(&cfg.GPUClass, "gpu-class", engineserver.DefaultGPUClass, "engine preset: h100, a100 or l4")
	fs.StringVar(&cfg.Model, "model", engineserver.DefaultModel, "served model name")
	fs.IntVar(&cfg.Replicas, "replicas", 1, "engine replicas behind this endpoint")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed of generated text and injected faults")
	fs.Float64Var(&cfg.TimeScale, "time-scale", 1, "run the engine model this many times faster than real time")
	fs.IntVar(&cfg.DefaultMaxTokens, "default-max-tokens", engineserver.DefaultMaxTokens, "output tokens when a request sets no max_tokens")
	fs.StringVar(&cfg.Metrics, "metrics", engineserver.MetricsFull, `metrics on /metrics: "full" (vLLM's plus enginesim's batch limit, replicas and request counters) or "vllm" (only what vLLM exposes)`)
	fs.Float64Var(&cfg.LatencyMultiplier, "latency-multiplier", 1, "make prefill and decode this many times slower than the GPU class's preset")
	fs.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", 0, "most requests a replica runs at once, as vLLM's --max-num-seqs (0: the GPU class preset's)")
	fs.IntVar(&cfg.KVBlocks, "kv-blocks", 0, "KV-cache capacity of a replica in blocks of the preset's block size (0: the GPU class preset's)")
	var lora string
	fs.StringVar(&lora, "lora-modules", "", "LoRA adapters served besides --model, comma-separated, each NAME or NAME=PATH as vLLM's --lora-modules (the path is ignored)")
	fs.IntVar(&cfg.MaxLoRAs, "max-loras", 0, "most LoRA adapters in one replica's batch at once, as vLLM's --max-loras (0: 1 with --lora-modules)")
	fs.DurationVar(&cfg.LoRALoad, "lora-load", 0, "time loading an adapter onto the GPU adds to a step (0: 25ms)")
	fs.StringVar(&cfg.KVEvents.Endpoint, "kv-events-endpoint", "", "publish the prefix cache's changes as vLLM's KV events on this ZMQ PUB socket, tcp://host:port (empty: off)")
	fs.StringVar(&cfg.KVEvents.ReplayEndpoint, "kv-events-replay-endpoint", "", "ZMQ ROUTER socket answering replay requests for recent KV event batches, tcp://host:port (empty: none)")
	fs.StringVar(&cfg.KVEvents.Topic, "kv-events-topic", "", "topic frame of every KV event message (vLLM's default: empty)")
	fs.IntVar(&cfg.KVEvents.BufferSteps, "kv-events-buffer-steps", engineserver.DefaultKVBufferSteps, "KV event batches kept for replay requests (vLLM's buffer_steps)")
	fs.IntVar(&cfg.KVEvents.HWM, "kv-events-hwm", engineserver.DefaultKVHWM, "KV event batches queued for the PUB socket before new ones are dropped (vLLM's hwm)")
	fs.StringVar(&cfg.KVEvents.Encoding, "kv-events-encoding", engineserver.KVEncodingMap, `msgpack layout of KV event batches: "map" (current vLLM) or "array" (earlier vLLM's array_like structs)`)
	conn.Register(fs) // unused: the engine publishes nothing itself; every service takes them
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	for _, m := range strings.Split(lora, ",") {
		if name, _, _ := strings.Cut(strings.TrimSpace(m), "="); name != "" {
			cfg.LoRAModules = append(cfg.LoRAModules, name)
		}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	if !(cfg.LatencyMultiplier > 0) { // zero would mean the default in Config
		return fmt.Errorf("%w: --latency-multiplier must be positive, got %v", cli.ErrUsage, cfg.LatencyMultiplier)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	s, err := engineserver.New(cfg)
	if err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	return s.Run(ctx)
}
