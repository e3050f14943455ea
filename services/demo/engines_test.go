package demo

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/simulator/engineserver"
)

// TestEngineLatencyMultiplier: an engine spec's latency multiplier
// reaches the engine (an out-of-range one is refused by the engine's
// config check; a valid one starts).
func TestEngineLatencyMultiplier(t *testing.T) {
	for _, tc := range []struct {
		mult float64
		ok   bool
	}{{0, true}, {6, true}, {5000, false}} {
		ctx, cancel := context.WithCancel(context.Background())
		g, gctx := errgroup.WithContext(ctx)
		cfg := Config{Topology: Topology{Engines: []EngineSpec{{ID: "e", Region: "r", GPUClass: "h100", LatencyMultiplier: tc.mult}}},
			Model: "m", Logger: slog.New(slog.DiscardHandler)}
		_, err := startEngines(gctx, g, cfg, nil, cfg.Logger)
		cancel()
		if werr := g.Wait(); werr != nil {
			t.Fatalf("multiplier %v: engine: %v", tc.mult, werr)
		}
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, engineserver.ErrInvalidConfig)) {
			t.Errorf("multiplier %v: err %v, want ok=%v", tc.mult, err, tc.ok)
		}
	}
}
