// Package combiner is the `switchyard combiner` command: it merges the
// partition states that `switchyard processor --mode partitioned`
// instances publish and publishes the estimates of every window all input
// partitions have passed (streams/process RunCombiner; see
// docs/processor.md, "Several instances").
package combiner

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
)

// Command is `switchyard combiner`.
func Command() cli.Command {
	return cli.Command{
		Name:    "combiner",
		Summary: "merge partitioned processors' partition states into estimates",
		Run:     run,
	}
}

func run(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("combiner", flag.ContinueOnError)
	var conn cli.Connection
	conn.RegisterKafka(fs)
	conn.RegisterReplication(fs, false)
	var cfg process.Config
	// The window flags must equal the instances'.
	fs.StringVar(&cfg.Group, "group", process.DefaultGroup, "the partitioned instances' consumer group (key of the combiner's checkpoint)")
	fs.DurationVar(&cfg.Window, "window", process.DefaultWindow, "window size (as the instances')")
	fs.DurationVar(&cfg.Slide, "slide", process.DefaultSlide, "window slide (as the instances')")
	fs.DurationVar(&cfg.AllowedLateness, "allowed-lateness", process.DefaultAllowedLateness, "allowed lateness (as the instances')")
	partitions := fs.Int("partitions", 3, "partitions of topics the combiner creates")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9106", "address of the /metrics endpoint (empty: off)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	cfg.TopicPrefix = conn.TopicPrefix
	cfg.Partitions = int32(*partitions)
	repl, err := streams.NewReplication(conn.Replication.KafkaFactor, conn.Replication.KafkaMinInsync)
	if err != nil {
		return fmt.Errorf("%w: --kafka-replication-factor, --kafka-min-insync-replicas: %w", cli.ErrUsage, err)
	}
	cfg.Replication = repl
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	reg := prometheus.NewRegistry()
	tel, err := obs.StartTelemetry(ctx, "combiner", reg, nil) // OTLP export by the OTEL_* variables
	if err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	defer tel.Close(ctx, cfg.Logger)
	cfg.TracerProvider = tel.TracerProvider
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: combiner config: %v", cli.ErrUsage, err)
	}
	if len(conn.Brokers()) == 0 {
		return fmt.Errorf("%w: no kafka brokers", cli.ErrUsage)
	}
	m, err := Metrics(reg, cfg.TopicPrefix)
	if err != nil {
		return err
	}
	cl, err := conn.NewKafka(append(process.CombinerClientOpts(cfg), kgo.WithHooks(m))...)
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	if *metricsListen != "" {
		_, stop, err := obs.ServeMetrics(ctx, *metricsListen, reg)
		if err != nil {
			return err
		}
		defer stop()
	}
	return process.RunCombiner(ctx, cl, cfg)
}
