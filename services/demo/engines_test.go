package demo

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/internal/cli"
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

// TestEngineBasePort: --engine-base-port puts engine i on base+i; a base
// whose last engine would pass 65535 is a usage error.
func TestEngineBasePort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	cfg := Config{Topology: Topology{Engines: []EngineSpec{{ID: "e", Region: "r", GPUClass: "h100"}}},
		Model: "m", Logger: slog.New(slog.DiscardHandler), EngineBasePort: base}
	fleet, err := startEngines(gctx, g, cfg, nil, cfg.Logger)
	cancel()
	if werr := g.Wait(); werr != nil {
		t.Fatalf("engine: %v", werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://127.0.0.1:" + strconv.Itoa(base); fleet[0].url != want {
		t.Fatalf("engine url %s, want %s", fleet[0].url, want)
	}
	var out, errOut strings.Builder
	if err := runCommand(context.Background(), []string{"--engine-base-port", "65530"}, &out, &errOut); !errors.Is(err, cli.ErrUsage) {
		t.Fatalf("--engine-base-port 65530: err %v, want a usage error", err)
	}
}
