package demo

import (
	"context"
	"fmt"
	"log/slog"

	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/simulator/engineserver"
)

// engineProc is one running simulated engine.
type engineProc struct {
	spec EngineSpec
	svc  *engineserver.Service
	url  string
}

// startEngines starts every engine of the topology on a free port and
// waits until all listen.
func startEngines(ctx context.Context, g *errgroup.Group, cfg Config, log *slog.Logger) ([]*engineProc, error) {
	var fleet []*engineProc
	for i, spec := range cfg.Topology.Engines {
		svc, err := engineserver.New(engineserver.Config{
			ID: spec.ID, Listen: "127.0.0.1:0", GPUClass: spec.GPUClass, Model: cfg.Model,
			LatencyMultiplier: spec.LatencyMultiplier,
			Seed:              int64(cfg.Seed) + int64(i), Logger: log.With("engine", spec.ID),
		})
		if err != nil {
			return nil, fmt.Errorf("engine %s: %w", spec.ID, err)
		}
		g.Go(func() error { return svc.Run(ctx) })
		fleet = append(fleet, &engineProc{spec: spec, svc: svc})
	}
	for _, e := range fleet {
		select {
		case <-e.svc.Ready():
			e.url = "http://" + e.svc.Addr()
		case <-ctx.Done():
			return nil, fmt.Errorf("engine %s did not start: %w", e.spec.ID, context.Cause(ctx))
		}
	}
	return fleet, nil
}

// kvHitRate is the fleet's prefix-cache hit rate in tokens.
func kvHitRate(fleet []*engineProc) float64 {
	var hits, queries int64
	for _, e := range fleet {
		st := e.svc.Stats()
		hits += st.PrefixHitTokens
		queries += st.PrefixQueryTokens
	}
	if queries == 0 {
		return 0
	}
	return float64(hits) / float64(queries)
}
