// Package sim is the `switchyard sim` command: it replays a scenario's
// workload through each routing policy on a virtual clock and prints
// their latency, goodput, cache and stability metrics side by side.
package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"

	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/simulator/des"
	"github.com/switchyard-llm/switchyard/simulator/plots"
	"github.com/switchyard-llm/switchyard/simulator/policy"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
	"github.com/switchyard-llm/switchyard/simulator/workload"
)

// Command returns the `sim` subcommand.
func Command() cli.Command {
	return cli.Command{
		Name:    "sim",
		Summary: "simulate routing policies on a scenario in virtual time",
		Run:     run,
	}
}

// Config is one simulation run.
type Config struct {
	Scenario string
	// FleetFrom is a fleet file (`switchyard export-fleet`) simulated in
	// place of a scenario: the live fleet replaying Trace, its digital
	// twin (scenario.Fleet.Scenario).
	FleetFrom string
	Trace     string
	Policies  []string
	// Seed overrides the scenario's seed when >= 0.
	Seed     int64
	JSON     bool
	PlotsDir string
	// RequestsFile, when set, receives every request's outcome under
	// every policy as JSON lines (des.RequestResult plus "policy").
	RequestsFile string
	Strict       bool
	// Format overrides what the trace readers infer.
	Format workload.Format
	// Parallel bounds the policies simulated at once (default GOMAXPROCS).
	Parallel int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	var cfg Config
	var pols string
	fs.StringVar(&cfg.Scenario, "scenario", "", "scenario file (JSON; see docs/sim.md)")
	fs.StringVar(&cfg.FleetFrom, "fleet-from", "", "fleet file written by switchyard export-fleet, simulated in place of --scenario (needs --trace, the export-trace of the same range)")
	fs.StringVar(&cfg.Trace, "trace", "", "trace file replacing a mooncake or azure scenario's (JSONL: Mooncake, Qwen-Bailian; CSV: Azure, BurstGPT; an error for a generator scenario)")
	fs.StringVar(&pols, "policies", strings.Join(policy.Names(), ","), "comma-separated policies to compare")
	fs.Int64Var(&cfg.Seed, "seed", -1, "random seed (default: the scenario's)")
	fs.BoolVar(&cfg.JSON, "json", false, "print one JSON object with every policy's metrics as the last line")
	fs.StringVar(&cfg.PlotsDir, "plots", "", "directory to write PNG plots into (TTFT CDF, weights, utilization)")
	fs.StringVar(&cfg.RequestsFile, "requests", "", "write every request's outcome under every policy to this file as JSON lines (engine, TTFT, engine TTFT, tokens; docs/sim.md)")
	fs.BoolVar(&cfg.Strict, "strict", false, "fail on the first malformed trace row instead of skipping it")
	unit := fs.String("trace-time-unit", "", "unit of the trace's numeric times, ms or s (default: inferred, docs/sim.md#trace-formats)")
	blockTokens := fs.Int("trace-block-tokens", 0, "size in tokens of a JSONL trace's hash_ids blocks, or of a CSV trace's synthesised ones (default: inferred)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	var err error
	if cfg.Format, err = workload.ParseFormat(*unit, *blockTokens); err != nil {
		return fmt.Errorf("%w: --trace-time-unit, --trace-block-tokens: %w", cli.ErrUsage, err)
	}
	switch {
	case cfg.Scenario != "" && cfg.FleetFrom != "":
		return fmt.Errorf("%w: --scenario and --fleet-from exclude each other", cli.ErrUsage)
	case cfg.FleetFrom != "" && cfg.Trace == "":
		return fmt.Errorf("%w: --fleet-from needs --trace (the export-trace of the same range)", cli.ErrUsage)
	case cfg.Scenario == "" && cfg.FleetFrom == "":
		return fmt.Errorf("%w: --scenario or --fleet-from is required\n%s", cli.ErrUsage, cli.Usage(fs))
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	for _, p := range strings.Split(pols, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Policies = append(cfg.Policies, p)
		}
	}
	return Run(ctx, cfg, stdout, stderr)
}

// Output is the `--json` object.
type Output struct {
	Scenario string                 `json:"scenario"`
	Seed     uint64                 `json:"seed"`
	Requests int                    `json:"requests"`
	SpanS    float64                `json:"span_s"`
	Trace    *TraceReport           `json:"trace,omitempty"`
	Policies map[string]des.Metrics `json:"policies"`
}

// TraceReport says what the trace reader skipped.
type TraceReport struct {
	Rows           int   `json:"rows"`
	Skipped        int   `json:"skipped"`
	FirstBadLines  []int `json:"first_bad_lines,omitempty"`
	StrictRejected bool  `json:"-"`
	// BlockTokens is the size of the trace's prefix blocks and TickMs
	// the quantum of its arrivals, spread over each tick (0: none), as
	// the reader found them (docs/sim.md#trace-formats).
	BlockTokens int   `json:"block_tokens"`
	TickMs      int64 `json:"tick_ms"`
}

// ErrUnknownPolicy is wrapped when --policies names a policy that does
// not exist.
var ErrUnknownPolicy = errors.New("unknown policy")

// Run simulates cfg and writes the table (and JSON) to stdout.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	if len(cfg.Policies) == 0 {
		cfg.Policies = policy.Names()
	}
	factories := make([]des.Factory, len(cfg.Policies))
	seen := map[string]bool{}
	for i, name := range cfg.Policies {
		if seen[name] {
			return fmt.Errorf("%w: policy %q listed twice", cli.ErrUsage, name)
		}
		seen[name] = true
		f, err := policy.New(name, 0)
		if err != nil {
			return fmt.Errorf("%w: %w: %v", cli.ErrUsage, ErrUnknownPolicy, err)
		}
		factories[i] = f
	}
	sc, err := load(cfg)
	if err != nil {
		return err
	}
	seed := sc.Seed
	if cfg.Seed >= 0 {
		seed = uint64(cfg.Seed)
	}
	for i, name := range cfg.Policies {
		factories[i], _ = policy.New(name, seed)
	}
	wl, err := sc.Build(scenario.BuildOptions{Seed: seed, Trace: cfg.Trace, Strict: cfg.Strict, Format: cfg.Format})
	if errors.Is(err, scenario.ErrTraceOnGenerator) {
		return fmt.Errorf("%w: --trace %s: %w", cli.ErrUsage, cfg.Trace, err)
	}
	if err != nil {
		return err
	}
	out := Output{Scenario: sc.Name, Seed: seed, Requests: len(wl.Requests), SpanS: wl.Span.Seconds(), Policies: map[string]des.Metrics{}}
	if sc.Workload.Kind != scenario.KindGenerator {
		out.Trace = &TraceReport{Rows: wl.Report.Rows, Skipped: wl.Report.Skipped, FirstBadLines: wl.Report.FirstBad,
			BlockTokens: wl.BlockTokens, TickMs: wl.Report.Tick.Milliseconds()}
		if wl.Report.Skipped > 0 {
			fmt.Fprintf(stderr, "sim: trace: skipped %d malformed rows (first at lines %s); --strict makes this an error\n",
				wl.Report.Skipped, joinInts(wl.Report.FirstBad))
		}
	}
	results := make([]*des.Result, len(cfg.Policies))
	g, gctx := errgroup.WithContext(ctx)
	par := cfg.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	g.SetLimit(par)
	keep := cfg.PlotsDir != ""
	for i, name := range cfg.Policies {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			r, err := des.Run(sc, wl, name, factories[i], des.Options{Series: keep, Requests: cfg.RequestsFile != ""})
			if err != nil {
				return err
			}
			results[i] = r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, r := range results {
		out.Policies[r.Policy] = r.Metrics
	}
	writeTable(stdout, out, cfg.Policies, sc)
	if keep {
		files, err := plots.Write(cfg.PlotsDir, sc.Name, results)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "sim: wrote %d plots to %s\n", len(files), cfg.PlotsDir)
	}
	if cfg.RequestsFile != "" {
		if err := writeRequests(cfg.RequestsFile, results); err != nil {
			return err
		}
	}
	if cfg.JSON {
		b, err := json.Marshal(out)
		if err != nil {
			return fmt.Errorf("encoding results: %w", err)
		}
		fmt.Fprintf(stdout, "%s\n", b)
	}
	return nil
}

// load is cfg's scenario: the file, or the fleet's twin.
func load(cfg Config) (*scenario.Scenario, error) {
	if cfg.FleetFrom == "" {
		return scenario.Load(cfg.Scenario)
	}
	f, err := scenario.LoadFleet(cfg.FleetFrom)
	if err != nil {
		return nil, err
	}
	sc, err := f.Scenario(cfg.Trace)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.FleetFrom, err)
	}
	return sc, nil
}

func writeTable(w io.Writer, out Output, order []string, sc *scenario.Scenario) {
	fmt.Fprintf(w, "scenario %s: %d requests over %.0f s, seed %d, SLO TTFT <= %g ms and TBOT <= %g ms\n",
		out.Scenario, out.Requests, out.SpanS, out.Seed, sc.SLO.TTFTms, sc.SLO.TBOTms)
	if out.Trace != nil {
		fmt.Fprintf(w, "trace: %d rows, %d malformed rows skipped; %d-token prefix blocks", out.Trace.Rows, out.Trace.Skipped, out.Trace.BlockTokens)
		if out.Trace.TickMs > 0 {
			fmt.Fprintf(w, "; arrivals in %g-s ticks, spread over each", float64(out.Trace.TickMs)/1000)
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tttft p50\tp90\tp99\ttbot p99\te2e p50\tp99\tgoodput/s\tslo\tkv hit\tshed\tfailed\treversals\tamplitude\tcross-region\t")
	for _, name := range order {
		m := out.Policies[name]
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.1f\t%.0f\t%.0f\t%.2f\t%.1f%%\t%.1f%%\t%d\t%d\t%d\t%.3f\t%.1f%%\t\n",
			name, m.TTFTms.P50, m.TTFTms.P90, m.TTFTms.P99, m.TBOTms.P99, m.E2Ems.P50, m.E2Ems.P99,
			m.GoodputRPS, 100*m.SLOAttainment, 100*m.KVHitRate, m.Shed, m.Failed, m.WeightReversals, m.WeightReversalAmplitude, 100*m.CrossRegionShare)
	}
	tw.Flush()
	fmt.Fprintln(w, "latencies in ms; goodput = requests/s meeting the SLO; slo = share of all requests meeting it")
}

// requestLine is one line of --requests.
type requestLine struct {
	Policy string `json:"policy"`
	des.RequestResult
}

// writeRequests writes every request of every result as a JSON line, in
// policy then workload order.
func writeRequests(path string, results []*des.Result) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("writing %s: %w", path, cerr)
		}
	}()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range results {
		for _, q := range r.Requests {
			if err := enc.Encode(requestLine{Policy: r.Policy, RequestResult: q}); err != nil {
				return fmt.Errorf("writing %s: %w", path, err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func joinInts(x []int) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}
