// Package replay is the `switchyard replay` command: it parses flags,
// builds the Kafka client and runs the replay library (streams/replay; see
// docs/replay.md).
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/streams/replay"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// Command is `switchyard replay`.
func Command() cli.Command {
	return cli.Command{
		Name:    "replay",
		Summary: "replay a past time range through the processor and optimizer and write the snapshots, or --verify them against the live ones",
		Run:     run,
	}
}

// ParseTime accepts RFC 3339 or Unix milliseconds (replay.ParseTime).
func ParseTime(s string) (time.Time, error) { return replay.ParseTime(s) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	var conn cli.Connection
	conn.Register(fs)
	from := fs.String("from", "", "start of the range (RFC 3339 or Unix ms); required but with --verify")
	to := fs.String("to", "", "end of the range (RFC 3339 or Unix ms); required but with --verify")
	verify := fs.Bool("verify", false, "replay the whole retained history with the settings the live processor and optimizer recorded, compare the snapshots of (--from, --to] (default all) with the audit stream, print one JSON line and exit 1 unless all are identical")
	auditStream := fs.String("audit-stream", snapshots.DefaultAuditStream, "JetStream stream of the live snapshots (--verify)")
	cfgFile := fs.String("config", "", "YAML file of processor and optimizer settings (what-if), applied over --settings")
	base := fs.String("settings", "recorded", "settings the replay starts from: recorded (the ones the live processor and optimizer wrote to the settings topic, latest at or before --to) or defaults (the built-in defaults); --config and --set change them")
	var sets setFlags
	fs.Var(&sets, "set", "override one setting over --settings and --config, as section.key=value with the config file's keys (optimizer.max_utilization=0.5, processor.window=20s); repeatable")
	warmup := fs.Duration("warmup", 0, "history read before --from to warm the processor's windows and the planner's state: 0 the whole retained history (a sub-range's snapshots are then the live ones, with the live settings); positive at least a window plus the allowed lateness (faster; the first snapshots may differ from live)")
	outFile := fs.String("out", "", `output file ("-" for stdout); required`)
	format := fs.String("format", "jsonl", "output format: jsonl (one protojson snapshot per line) or binary (uvarint-length-delimited protobuf)")
	registry := fs.String("engine-registry", "", "engine registry file (YAML or JSON, docs/security.md#engine-registry), as the live processor's and optimizer's: signals of other engines are dead-lettered and their estimates never planned (empty: any engine the records name)")
	maxGain := fs.Float64("max-claim-gain", 0, "the optimizer's --max-claim-gain: an engine estimate claiming more than this times its baseline capacity, or less than its baseline latency over it, is quarantined (0: 2 with --engine-registry, off without; negative: off)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	var engines *fleet.Registry
	if *registry != "" {
		var err error
		if engines, err = fleet.Load(*registry); err != nil {
			return fmt.Errorf("%w: --engine-registry: %w", cli.ErrUsage, err)
		}
	}
	if _, err := fleet.GuardFor(engines, *maxGain); err != nil {
		return fmt.Errorf("%w: --max-claim-gain: %w", cli.ErrUsage, err)
	}
	if *verify {
		return runVerify(ctx, conn, replay.VerifyConfig{Registry: engines, MaxGain: *maxGain}, *from, *to, *auditStream, stdout, stderr)
	}
	natsSet := false
	fs.Visit(func(f *flag.Flag) { natsSet = natsSet || f.Name == "nats-url" })
	if natsSet {
		return fmt.Errorf("%w: --nats-url is for --verify (a replay writes to a file, never to NATS)", cli.ErrUsage)
	}
	var fromT, toT time.Time
	var err error
	if fromT, err = ParseTime(*from); err != nil {
		return fmt.Errorf("%w: --from: %v", cli.ErrUsage, err)
	}
	if toT, err = ParseTime(*to); err != nil {
		return fmt.Errorf("%w: --to: %v", cli.ErrUsage, err)
	}
	if *base != "recorded" && *base != "defaults" {
		return fmt.Errorf("%w: --settings %q: want recorded or defaults", cli.ErrUsage, *base)
	}
	if *warmup < 0 {
		return fmt.Errorf("%w: --warmup %v is negative", cli.ErrUsage, *warmup)
	}
	if *outFile == "" {
		return fmt.Errorf("%w: --out is required", cli.ErrUsage)
	}
	f := replay.JSONLines
	switch *format {
	case "jsonl":
	case "binary":
		f = replay.Binary
	default:
		return fmt.Errorf("%w: --format %q", cli.ErrUsage, *format)
	}
	// The file and the overrides are checked before any broker is asked.
	if err := overrides(&replay.Config{}, *cfgFile, sets); err != nil {
		return err
	}
	brokers := conn.Brokers()
	if len(brokers) == 0 {
		return fmt.Errorf("%w: no kafka brokers", cli.ErrUsage)
	}
	cl, err := conn.NewKafka()
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	var cfg replay.Config
	if *base == "recorded" {
		var n [2]int
		if cfg, n, err = replay.Recorded(ctx, cl, conn.TopicPrefix, toT); err != nil {
			return fmt.Errorf("%w (replay with --settings defaults and a --config to replay without them)", err)
		}
		logger.Info("replaying with the recorded settings", "processor_settings", n[0], "optimizer_settings", n[1])
	}
	if err := overrides(&cfg, *cfgFile, sets); err != nil {
		return err
	}
	cfg.From, cfg.To, cfg.Warmup = fromT, toT, *warmup
	cfg.Registry, cfg.MaxGain = engines, *maxGain
	cfg.TopicPrefix = conn.TopicPrefix
	cfg.Logger = logger
	out := stdout
	if *outFile != "-" {
		file, err := os.Create(*outFile)
		if err != nil {
			return fmt.Errorf("creating %s: %w", *outFile, err)
		}
		defer file.Close()
		out = file
	}
	res, err := replay.Run(ctx, cl, cfg, out, f)
	if err != nil {
		return err
	}
	cfg.Logger.Info("replay done", "records", res.Records, "windows", res.Windows, "snapshots", res.Snapshots,
		"dead_lettered", res.DeadLettered, "late", res.Late, "unregistered", res.Unregistered, "quarantined", res.Quarantined)
	if c, ok := out.(io.Closer); ok && out != stdout {
		return c.Close()
	}
	return nil
}

// overrides applies the --config file, then the --set overrides, to cfg.
func overrides(cfg *replay.Config, file string, sets setFlags) error {
	if file != "" {
		if err := replay.LoadConfig(file, cfg); err != nil {
			return fmt.Errorf("%w: %v", cli.ErrUsage, err)
		}
	}
	if err := replay.ApplySets(sets, cfg); err != nil {
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	return nil
}

// setFlags collects repeated --set flags.
type setFlags []string

func (s *setFlags) String() string { return strings.Join(*s, ",") }

func (s *setFlags) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// runVerify is replay --verify; vc holds the registry settings.
func runVerify(ctx context.Context, conn cli.Connection, vc replay.VerifyConfig, from, to, auditStream string, stdout, stderr io.Writer) error {
	var err error
	if from != "" {
		if vc.From, err = ParseTime(from); err != nil {
			return fmt.Errorf("%w: --from: %v", cli.ErrUsage, err)
		}
	}
	if to != "" {
		if vc.To, err = ParseTime(to); err != nil {
			return fmt.Errorf("%w: --to: %v", cli.ErrUsage, err)
		}
	}
	if len(conn.Brokers()) == 0 {
		return fmt.Errorf("%w: no kafka brokers", cli.ErrUsage)
	}
	if conn.NATSURL == "" {
		return fmt.Errorf("%w: --verify reads the live snapshots from NATS: --nats-url is required", cli.ErrUsage)
	}
	vc.TopicPrefix = conn.TopicPrefix
	vc.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := conn.ConnectNATS(nats.Name("switchyard-replay"))
	if err != nil {
		return fmt.Errorf("connecting to nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	live, err := replay.ReadAudit(ctx, js, auditStream)
	if err != nil {
		return err
	}
	cl, err := conn.NewKafka()
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	res, err := replay.Verify(ctx, cl, live, vc)
	if err != nil {
		return err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", b)
	if res.Identical < res.Compared {
		return fmt.Errorf("%w: %d of %d snapshots identical (first difference at version %d)", ErrNotReproduced, res.Identical, res.Compared, res.FirstDiffVersion)
	}
	return nil
}

// ErrNotReproduced is returned by replay --verify when a live snapshot
// was not reproduced.
var ErrNotReproduced = errors.New("replay does not reproduce live")
