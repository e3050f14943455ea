// Command sim is the simulator's evaluation matrix: it runs every shipped
// scenario with its own workload, and every trace-workload scenario with
// every request trace of a traces directory, each with several seeds and
// every policy, and scores `switchyard` against each baseline on p99
// TTFT, goodput and KV-cache hit rate, with the routing-quality goals of
// issue 10 checked over all cells.
//
//	go run ./bench/sim                                # what bench/sim/matrix.sh runs
//	go run ./bench/sim -seeds 1 -only region-bc,hetero-fleet
//	go run ./bench/sim -traces '' -json /tmp/matrix.json
//
// A cell is one (scenario, trace, seed). Files in the traces directory
// that the trace reader cannot read as requests (ServeGen's rate profile,
// an aggregate of per-client rates) are skipped with a note.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/policy"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
	"github.com/switchyard-llm/switchyard/simulator/workload"
)

func main() {
	var cfg config
	flag.StringVar(&cfg.scenarios, "scenarios", "simulator/testdata/scenarios", "directory of scenario files (*.json)")
	flag.StringVar(&cfg.traces, "traces", "../shared/traces", "directory of traces (*.jsonl, *.csv) replayed on the trace-workload scenarios; empty for none")
	flag.IntVar(&cfg.seeds, "seeds", 5, "seeds per cell (1..N)")
	flag.StringVar(&cfg.only, "only", "", "comma-separated scenario names to run (default all)")
	flag.IntVar(&cfg.parallel, "parallel", runtime.GOMAXPROCS(0), "policy runs at once")
	flag.StringVar(&cfg.jsonOut, "json", "", "also write every cell's metrics to this file")
	flag.Parse()
	if err := run(context.Background(), cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sim matrix:", err)
		os.Exit(1)
	}
}

type config struct {
	scenarios, traces, only, jsonOut string
	seeds, parallel                  int
}

// cell is one scenario run with one trace (empty: the scenario's own
// workload) and one seed, under every policy.
type cell struct {
	Scenario string                 `json:"scenario"`
	Trace    string                 `json:"trace,omitempty"`
	Seed     uint64                 `json:"seed"`
	Requests int                    `json:"requests"`
	Policies map[string]des.Metrics `json:"policies"`

	sc *scenario.Scenario
	wl *scenario.Stream
}

// group names the cell's scenario and trace: the cells of one group
// differ only in their seed.
func (c *cell) group() string {
	if c.Trace == "" {
		return c.Scenario
	}
	return c.Scenario + "+" + strings.TrimSuffix(c.Trace, filepath.Ext(c.Trace))
}

func (c *cell) name() string { return fmt.Sprintf("%s/s%d", c.group(), c.Seed) }

func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	if cfg.seeds < 1 {
		return fmt.Errorf("-seeds %d, want >= 1", cfg.seeds)
	}
	start := time.Now()
	scs, err := loadScenarios(cfg.scenarios, cfg.only)
	if err != nil {
		return err
	}
	traces, err := listTraces(cfg.traces)
	if err != nil {
		return err
	}
	var cells []*cell
	for _, sc := range scs {
		for seed := uint64(1); seed <= uint64(cfg.seeds); seed++ {
			cells = append(cells, &cell{Scenario: sc.Name, Seed: seed, sc: sc})
			if sc.Workload.Kind == scenario.KindGenerator {
				continue
			}
			for _, tr := range traces {
				cells = append(cells, &cell{Scenario: sc.Name, Trace: filepath.Base(tr), Seed: seed, sc: sc})
			}
		}
	}
	// A trace nothing can be read from is skipped.
	skipped := map[string]string{}
	for _, tr := range traces {
		if note := unreadable(scs, tr); note != "" {
			skipped[filepath.Base(tr)] = note
		}
	}
	kept := cells[:0]
	for _, c := range cells {
		if _, bad := skipped[c.Trace]; !bad || c.Trace == "" {
			kept = append(kept, c)
		}
	}
	cells = kept
	for _, tr := range slices.Sorted(maps.Keys(skipped)) {
		fmt.Fprintf(stderr, "sim matrix: skipped %s: %s\n", tr, skipped[tr])
	}
	if err := simulate(ctx, cells, cfg.traces, cfg.parallel); err != nil {
		return err
	}
	rep := score(cells)
	rep.write(stdout)
	fmt.Fprintf(stdout, "\n%d cells (%d scenarios, seeds 1-%d), %d policy runs in %.0f s on %d CPUs\n",
		len(cells), len(scs), cfg.seeds, len(cells)*len(policy.Names()), time.Since(start).Seconds(), runtime.GOMAXPROCS(0))
	for _, tr := range slices.Sorted(maps.Keys(skipped)) {
		fmt.Fprintf(stdout, "skipped trace %s: %s\n", tr, skipped[tr])
	}
	if cfg.jsonOut != "" {
		b, err := json.MarshalIndent(cells, "", " ")
		if err != nil {
			return fmt.Errorf("encoding cells: %w", err)
		}
		if err := os.WriteFile(cfg.jsonOut, b, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", cfg.jsonOut, err)
		}
	}
	return nil
}

func loadScenarios(dir, only string) ([]*scenario.Scenario, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("listing scenarios: %w", err)
	}
	want, found := map[string]bool{}, map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []*scenario.Scenario
	for _, f := range files {
		if strings.HasSuffix(f, ".schema.json") {
			continue
		}
		sc, err := scenario.Load(f)
		if err != nil {
			return nil, err
		}
		if len(want) > 0 && !want[sc.Name] {
			continue
		}
		found[sc.Name] = true
		out = append(out, sc)
	}
	for n := range want {
		if !found[n] {
			return nil, fmt.Errorf("no scenario named %s in %s", n, dir)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenarios in %s", dir)
	}
	return out, nil
}

func listTraces(dir string) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	var out []string
	for _, ext := range []string{"*.jsonl", "*.csv"} {
		m, err := filepath.Glob(filepath.Join(dir, ext))
		if err != nil {
			return nil, fmt.Errorf("listing traces: %w", err)
		}
		out = append(out, m...)
	}
	if len(out) == 0 {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("traces directory %s: %w (pass -traces '' to run without)", dir, err)
		}
	}
	slices.Sort(out)
	return out, nil
}

// unreadable says why trace cannot serve as a workload ("" when it can):
// no row of it reads as a request.
func unreadable(scs []*scenario.Scenario, trace string) string {
	for _, sc := range scs {
		if sc.Workload.Kind == scenario.KindGenerator {
			continue
		}
		wl, err := sc.Build(scenario.BuildOptions{Seed: 1, Trace: trace})
		if errors.Is(err, workload.ErrNoRows) || err == nil && len(wl.Requests) == 0 {
			return "not a request trace: no row reads as a request (docs/sim.md#trace-formats)"
		}
		if err != nil {
			return err.Error()
		}
		return ""
	}
	return ""
}

// simulate runs every policy on every cell, at most parallel runs at
// once. A cell's workload is built by its first run and dropped after its
// last, so only the cells in progress hold one.
func simulate(ctx context.Context, cells []*cell, traces string, parallel int) error {
	names := policy.Names()
	results := make([][]des.Metrics, len(cells))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for i, c := range cells {
		results[i] = make([]des.Metrics, len(names))
		var once sync.Once
		var buildErr error
		left := atomic.Int32{}
		left.Store(int32(len(names)))
		build := func() {
			opt := scenario.BuildOptions{Seed: c.Seed}
			if c.Trace != "" {
				opt.Trace = filepath.Join(traces, c.Trace)
			}
			c.wl, buildErr = c.sc.Build(opt)
			if buildErr == nil {
				c.Requests = len(c.wl.Requests)
			}
		}
		for j, name := range names {
			g.Go(func() error {
				if err := gctx.Err(); err != nil {
					return err
				}
				once.Do(build)
				if buildErr != nil {
					return fmt.Errorf("%s: %w", c.name(), buildErr)
				}
				defer func() {
					if left.Add(-1) == 0 {
						c.wl = nil // every policy is done with it
					}
				}()
				f, err := policy.New(name, c.Seed)
				if err != nil {
					return err
				}
				r, err := des.Run(c.sc, c.wl, name, f, des.Options{})
				if err != nil {
					return fmt.Errorf("%s %s: %w", c.name(), name, err)
				}
				results[i][j] = r.Metrics
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, c := range cells {
		c.Policies = map[string]des.Metrics{}
		for j, name := range names {
			c.Policies[name] = results[i][j]
		}
	}
	return nil
}
