package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/simulator/engineserver"
)

// engineProc is one running simulated engine.
type engineProc struct {
	spec EngineSpec
	svc  *engineserver.Service
	url  string
}

// enginePortsFile, under the data dir, holds each engine's address in
// the run that wrote it: {"engine id": "host:port"}.
const enginePortsFile = "demo-engines.json"

// startEngines starts every engine of the topology on a free port and
// waits until all listen. With a data dir, each engine listens where it
// did in the previous run on that dir (when the port is free), so the
// snapshots, estimates and checkpoints kept there, which name engines by
// id and URL, still point at the same engines: a restarted demo never
// routes to an address the previous run's engine left. The addresses are
// saved once every engine listens.
func startEngines(ctx context.Context, g *errgroup.Group, cfg Config, reg prometheus.Registerer, log *slog.Logger) ([]*engineProc, error) {
	prev, err := loadEnginePorts(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var fleet []*engineProc
	for i, spec := range cfg.Topology.Engines {
		listen := "127.0.0.1:0"
		if cfg.EngineBasePort > 0 {
			listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.EngineBasePort+i))
		} else if addr, ok := prev[spec.ID]; ok {
			if ln, err := net.Listen("tcp", addr); err != nil {
				log.Warn("the previous run's engine address is taken; the engine moves, and snapshots kept from that run route to the old address until the next one",
					"engine", spec.ID, "addr", addr, "err", err)
			} else {
				ln.Close()
				listen = addr
			}
		}
		svc, err := engineserver.New(engineserver.Config{
			ID: spec.ID, Listen: listen, GPUClass: spec.GPUClass, Model: cfg.Model,
			LatencyMultiplier: spec.LatencyMultiplier,
			Seed:              int64(cfg.Seed) + int64(i), Logger: log.With("engine", spec.ID),
			Registerer: reg, // the demo's /metrics: every engine's series with an engine label
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
	if err := saveEnginePorts(cfg.DataDir, fleet); err != nil {
		return nil, err
	}
	return fleet, nil
}

// loadEnginePorts reads the engines' addresses saved under dir (none
// without a dir or a file).
func loadEnginePorts(dir string) (map[string]string, error) {
	if dir == "" {
		return nil, nil
	}
	path := filepath.Join(dir, enginePortsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading engine addresses: %w", err)
	}
	var addrs map[string]string
	if err := json.Unmarshal(b, &addrs); err != nil {
		return nil, fmt.Errorf("engine addresses %s (delete it to start on free ports): %w", path, err)
	}
	return addrs, nil
}

// saveEnginePorts writes the fleet's addresses under dir (nothing
// without a dir), replacing the file at once.
func saveEnginePorts(dir string, fleet []*engineProc) error {
	if dir == "" {
		return nil
	}
	addrs := map[string]string{}
	for _, e := range fleet {
		addrs[e.spec.ID] = e.svc.Addr()
	}
	b, err := json.MarshalIndent(addrs, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding engine addresses: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("saving engine addresses: %w", err)
	}
	path := filepath.Join(dir, enginePortsFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("saving engine addresses: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("saving engine addresses: %w", err)
	}
	return nil
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
