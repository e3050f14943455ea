package processor

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/obs"
)

// Command is `switchyard processor`.
func Command() cli.Command {
	return cli.Command{
		Name:    "processor",
		Summary: "window engine signals and routing events into estimates",
		Run:     run,
	}
}

func run(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("processor", flag.ContinueOnError)
	var conn cli.Connection
	conn.Register(fs)
	var cfg Config
	fs.StringVar(&cfg.Group, "group", "switchyard-processor", "consumer group (and checkpoint key)")
	fs.DurationVar(&cfg.Window, "window", 30e9, "window size")
	fs.DurationVar(&cfg.Slide, "slide", 10e9, "window slide (window must be a multiple of it)")
	fs.DurationVar(&cfg.AllowedLateness, "allowed-lateness", 5e9, "how far out of event-time order a record may arrive and still count")
	partitions := fs.Int("partitions", 3, "partitions of topics the processor creates")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9101", "address of the /metrics endpoint (empty: off)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	cfg.KafkaBrokers = conn.Brokers()
	cfg.TopicPrefix = conn.TopicPrefix
	cfg.Partitions = int32(*partitions)
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	s, err := New(cfg)
	if err != nil {
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	if *metricsListen != "" {
		_, stop, err := obs.ServeMetrics(ctx, *metricsListen, reg)
		if err != nil {
			return err
		}
		defer stop()
	}
	return s.Run(ctx)
}
