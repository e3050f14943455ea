// Package exporttrace is the `switchyard export-trace` command: it turns
// the routing events of a time range into a trace `switchyard sim
// --trace` reads (streams/replay.ExportTrace; see docs/replay.md).
package exporttrace

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/streams/replay"
)

// Command is `switchyard export-trace`.
func Command() cli.Command {
	return cli.Command{
		Name:    "export-trace",
		Summary: "write the requests of a time range (from the routing events) as a trace for switchyard sim --trace",
		Run:     run,
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export-trace", flag.ContinueOnError)
	var conn cli.Connection
	conn.RegisterKafka(fs)
	from := fs.String("from", "", "start of the arrivals (RFC 3339 or Unix ms); required")
	to := fs.String("to", "", "end of the arrivals, exclusive (RFC 3339 or Unix ms); required")
	outFile := fs.String("out", "", `trace file ("-" for stdout); required`)
	maxRequest := fs.Duration("max-request", 10*time.Minute, "longest request: routing events are produced at completion, so records up to --to plus this are read")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	var cfg replay.TraceConfig
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
	if *maxRequest <= 0 {
		return fmt.Errorf("%w: --max-request must be positive", cli.ErrUsage)
	}
	if len(conn.Brokers()) == 0 {
		return fmt.Errorf("%w: no kafka brokers", cli.ErrUsage)
	}
	cfg.TopicPrefix, cfg.MaxRequest = conn.TopicPrefix, *maxRequest
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	out, summary := stdout, stdout
	var file *os.File
	if *outFile == "-" {
		summary = stderr
	} else {
		if file, err = os.Create(*outFile); err != nil {
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
	res, err := replay.ExportTrace(ctx, cl, cfg, out)
	if err != nil {
		return err
	}
	if file != nil {
		if err := file.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", *outFile, err)
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(summary, "%s\n", b)
	return err
}
