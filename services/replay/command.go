// Package replay is the `switchyard replay` command: it parses flags,
// builds the Kafka client and runs the replay library (streams/replay; see
// docs/replay.md).
package replay

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/streams/replay"
)

// Command is `switchyard replay`.
func Command() cli.Command {
	return cli.Command{
		Name:    "replay",
		Summary: "replay a past time range through the processor and optimizer and write the snapshots",
		Run:     run,
	}
}

// ParseTime accepts RFC 3339 or Unix milliseconds.
func ParseTime(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: want RFC 3339 or Unix milliseconds", s)
	}
	return t, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	var conn cli.Connection
	conn.RegisterKafka(fs)
	from := fs.String("from", "", "start of the range (RFC 3339 or Unix ms); required")
	to := fs.String("to", "", "end of the range (RFC 3339 or Unix ms); required")
	cfgFile := fs.String("config", "", "YAML file of processor and optimizer settings (what-if); default the live defaults")
	outFile := fs.String("out", "", `output file ("-" for stdout); required`)
	format := fs.String("format", "jsonl", "output format: jsonl (one protojson snapshot per line) or binary (uvarint-length-delimited protobuf)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	var cfg replay.Config
	var err error
	if cfg.From, err = ParseTime(*from); err != nil {
		return fmt.Errorf("%w: --from: %v", cli.ErrUsage, err)
	}
	if cfg.To, err = ParseTime(*to); err != nil {
		return fmt.Errorf("%w: --to: %v", cli.ErrUsage, err)
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
	if *cfgFile != "" {
		if err := replay.LoadConfig(*cfgFile, &cfg); err != nil {
			return fmt.Errorf("%w: %v", cli.ErrUsage, err)
		}
	}
	brokers := conn.Brokers()
	if len(brokers) == 0 {
		return fmt.Errorf("%w: no kafka brokers", cli.ErrUsage)
	}
	cfg.TopicPrefix = conn.TopicPrefix
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	out := stdout
	if *outFile != "-" {
		file, err := os.Create(*outFile)
		if err != nil {
			return fmt.Errorf("creating %s: %w", *outFile, err)
		}
		defer file.Close()
		out = file
	}
	cl, err := conn.NewKafka()
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	res, err := replay.Run(ctx, cl, cfg, out, f)
	if err != nil {
		return err
	}
	cfg.Logger.Info("replay done", "records", res.Records, "windows", res.Windows, "snapshots", res.Snapshots,
		"dead_lettered", res.DeadLettered, "late", res.Late)
	if c, ok := out.(io.Closer); ok && out != stdout {
		return c.Close()
	}
	return nil
}
