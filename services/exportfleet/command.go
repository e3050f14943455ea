// Package exportfleet is the `switchyard export-fleet` command: it reads
// the processor's estimates of a time range (recomputed from the signal
// and routing-event topics with the recorded settings, as replay does)
// and writes the fleet they describe, the file `switchyard sim
// --fleet-from` simulates (scenario.Fleet; docs/sim.md, "Digital twin").
package exportfleet

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/schemas"
	"github.com/switchyard-llm/switchyard/simulator/scenario"
	"github.com/switchyard-llm/switchyard/streams/process"
	"github.com/switchyard-llm/switchyard/streams/replay"
)

// Command is `switchyard export-fleet`.
func Command() cli.Command {
	return cli.Command{
		Name:    "export-fleet",
		Summary: "write the fleet the estimates of a time range describe, for switchyard sim --fleet-from",
		Run:     run,
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export-fleet", flag.ContinueOnError)
	var conn cli.Connection
	conn.RegisterKafka(fs)
	from := fs.String("from", "", "start of the range (RFC 3339 or Unix ms); required")
	to := fs.String("to", "", "end of the range (RFC 3339 or Unix ms); required")
	outFile := fs.String("out", "", `fleet file ("-" for stdout); required`)
	warmup := fs.Duration("warmup", 0, "history before --from replayed to recompute the snapshot in force at --from, which the twin starts from (0: the whole retained history, as replay; the snapshot is then the live optimizer's)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	var cfg Config
	var err error
	if cfg.From, err = replay.ParseTime(*from); err != nil {
		return fmt.Errorf("%w: --from: %v", cli.ErrUsage, err)
	}
	if cfg.To, err = replay.ParseTime(*to); err != nil {
		return fmt.Errorf("%w: --to: %v", cli.ErrUsage, err)
	}
	if !cfg.To.After(cfg.From) {
		return fmt.Errorf("%w: --to must be after --from", cli.ErrUsage)
	}
	if *outFile == "" {
		return fmt.Errorf("%w: --out is required", cli.ErrUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	if len(conn.Brokers()) == 0 {
		return fmt.Errorf("%w: no kafka brokers", cli.ErrUsage)
	}
	if *warmup < 0 {
		return fmt.Errorf("%w: --warmup must not be negative", cli.ErrUsage)
	}
	cfg.TopicPrefix, cfg.Warmup = conn.TopicPrefix, *warmup
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	cl, err := conn.NewKafka()
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	fleet, err := Export(ctx, cl, cfg)
	if err != nil {
		return err
	}
	out, summary := stdout, stdout
	if *outFile == "-" {
		summary = stderr
	} else {
		f, err := os.Create(*outFile)
		if err != nil {
			return fmt.Errorf("creating %s: %w", *outFile, err)
		}
		defer f.Close()
		out = f
	}
	if err := scenario.WriteFleet(out, fleet); err != nil {
		return err
	}
	b, _ := json.Marshal(map[string]int{"engines": len(fleet.Engines), "clusters": len(fleet.Clusters), "windows": fleet.Windows})
	fmt.Fprintf(summary, "%s\n", b)
	return nil
}

// Config is one export.
type Config struct {
	TopicPrefix string
	From, To    time.Time
	// Warmup is the history before From replayed (replay.Config's: 0,
	// the whole retained history).
	Warmup time.Duration
	Logger *slog.Logger
}

// Export reads through cl the settings the live processor and optimizer
// recorded, recomputes with them the estimates of the windows ending in
// [From, To] from the signal and routing-event topics (replay.Run: the
// estimates the live processor published, byte for byte), and builds the
// fleet they describe with the recorded control settings, starting from
// the snapshot in force at From: the last one the replayed optimizer
// planned for a window ending at or before From (with the whole history
// as warm-up, the live optimizer's), none when the range starts with the
// pipeline.
func Export(ctx context.Context, cl *kgo.Client, cfg Config) (*scenario.Fleet, error) {
	rc, _, err := replay.Recorded(ctx, cl, cfg.TopicPrefix, cfg.To)
	if err != nil {
		return nil, err
	}
	rc.TopicPrefix, rc.From, rc.To, rc.Logger, rc.Warmup = cfg.TopicPrefix, cfg.From, cfg.To, cfg.Logger, cfg.Warmup
	var ests []*schemas.Estimate
	rc.OnWindow = func(f process.Fired) {
		// Only the range's windows: the warm-up may be the whole retained
		// history, whose estimates FleetFromEstimates would drop anyway.
		if f.End >= cfg.From.UnixMilli() && f.End <= cfg.To.UnixMilli() {
			ests = append(ests, f.Estimates...)
		}
	}
	var initial *schemas.WeightSnapshot
	planner := replay.OptimizerPlanner(rc.Settings)
	rc.Planner = replay.PlannerFunc(func(end time.Time, est []*schemas.Estimate) (*schemas.WeightSnapshot, error) {
		if end.After(cfg.From) {
			return nil, nil // the twin plans the range itself
		}
		snap, err := planner.Plan(end, est)
		if snap != nil {
			initial = snap
		}
		return snap, err
	})
	if _, err := replay.Run(ctx, cl, rc, io.Discard, replay.JSONLines); err != nil {
		return nil, fmt.Errorf("recomputing the estimates: %w", err)
	}
	fleet, err := scenario.FleetFromEstimates(ests, cfg.From, cfg.To)
	if err != nil {
		return nil, fmt.Errorf("%v to %v: %w", cfg.From, cfg.To, err)
	}
	fleet.Initial = scenario.InitialFrom(initial)
	fleet.Control = scenario.Control{
		WindowS: rc.Window.Seconds(), SlideS: rc.Slide.Seconds(), AllowedLatenessS: rc.AllowedLateness.Seconds(),
		MaxUtilization: rc.Settings.MaxUtilization, ChurnWeight: max(rc.Settings.ChurnWeight, 0),
		SignalIntervalS: fleet.Control.SignalIntervalS, // the scrapes the estimates counted
	}
	return fleet, nil
}
