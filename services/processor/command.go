// Package processor is the `switchyard processor` command: it parses
// flags, builds the Kafka client and runs the stream processor
// (streams/process; see docs/processor.md).
package processor

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/internal/brokerstate"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/process"
)

// The values of --mode.
const (
	ModeSingle      = "single"
	ModePartitioned = "partitioned"
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
	conn.RegisterKafka(fs)
	conn.RegisterReplication(fs, false)
	var cfg process.Config
	fs.StringVar(&cfg.Group, "group", process.DefaultGroup, "consumer group (and checkpoint key)")
	fs.DurationVar(&cfg.Window, "window", process.DefaultWindow, "window size")
	fs.DurationVar(&cfg.Slide, "slide", process.DefaultSlide, "window slide (window must be a multiple of it)")
	fs.DurationVar(&cfg.AllowedLateness, "allowed-lateness", process.DefaultAllowedLateness, "how far out of event-time order a record may arrive and still count")
	fs.DurationVar(&cfg.MaxClockSkew, "max-clock-skew", process.DefaultMaxClockSkew, "records dated further ahead of this clock are dead-lettered (negative: no limit)")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", process.DefaultSessionTimeout, "consumer group session timeout: how long a processor killed without leaving holds its partitions")
	fs.StringVar(&cfg.InstanceID, "instance-id", "", "static group membership: a processor restarted with the same id takes its partitions back at once (empty: dynamic)")
	partitions := fs.Int("partitions", 3, "partitions of topics the processor creates")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9101", "address of the /metrics endpoint (empty: off)")
	registry := fs.String("engine-registry", "", "engine registry file (YAML or JSON, docs/security.md#engine-registry): signals for engines outside it, or at another endpoint, are dead-lettered (empty: every engine's signals are taken)")
	lagMax := fs.Int("lag-max-groups", streams.DefaultLagGroups, "consumer groups with commits on the Switchyard topics whose lag switchyard_consumer_lag_records exports (the processor's group first, then by name; the rest counted in switchyard_consumer_lag_groups_omitted)")
	mode := fs.String("mode", ModeSingle, "single: the only active member of its group (others are hot standbys); partitioned: one of several instances sharing the input partitions, publishing partition states for `switchyard combiner`")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	if *mode != ModeSingle && *mode != ModePartitioned {
		return fmt.Errorf("%w: --mode %q: want %s or %s", cli.ErrUsage, *mode, ModeSingle, ModePartitioned)
	}
	if *lagMax < 1 {
		return fmt.Errorf("%w: --lag-max-groups %d: want at least 1", cli.ErrUsage, *lagMax)
	}
	cfg.Partitioned = *mode == ModePartitioned
	cfg.TopicPrefix = conn.TopicPrefix
	cfg.Partitions = int32(*partitions)
	if *registry != "" {
		er, err := fleet.Load(*registry)
		if err != nil {
			return fmt.Errorf("%w: --engine-registry: %w", cli.ErrUsage, err)
		}
		cfg.Registry = er
	}
	repl, err := streams.NewReplication(conn.Replication.KafkaFactor, conn.Replication.KafkaMinInsync)
	if err != nil {
		return fmt.Errorf("%w: --kafka-replication-factor, --kafka-min-insync-replicas: %w", cli.ErrUsage, err)
	}
	cfg.Replication = repl
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	tel, err := obs.StartTelemetry(ctx, "processor", reg, nil) // OTLP export by the OTEL_* variables
	if err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	defer tel.Close(ctx, cfg.Logger)
	cfg.TracerProvider = tel.TracerProvider
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: processor config: %v", cli.ErrUsage, err)
	}
	brokers := conn.Brokers()
	if len(brokers) == 0 {
		return fmt.Errorf("%w: no kafka brokers", cli.ErrUsage)
	}
	p, err := process.New(cfg)
	if err != nil {
		return err
	}
	cl, err := conn.NewKafka(p.ClientOpts()...)
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	bs, err := brokerstate.New(cfg.Logger, reg) // WARN/INFO, switchyard_broker_connected, /ready
	if err != nil {
		return err
	}
	if *metricsListen != "" {
		_, stop, err := obs.ServeMetrics(ctx, *metricsListen, reg, bs)
		if err != nil {
			return err
		}
		defer stop()
	}
	// Kafka down at start is waited for (and logged), as the other
	// services do, rather than failing the first topic creation.
	if err := bs.WaitUp(ctx, brokerstate.Kafka, brokerstate.PingKafka(cl)); err != nil {
		return nil // stopped before Kafka answered
	}
	defer bs.Go(ctx, brokerstate.Kafka, brokerstate.PingKafka(cl))()
	// switchyard_consumer_lag_records of every group on the topics (docs/topics.md#consumer-lag)
	lag, err := streams.NewGroupLag(cl, reg, streams.LagPrefix(cfg.TopicPrefix), streams.LagGroups(cfg.Group), streams.LagMaxGroups(*lagMax))
	if err != nil {
		return err
	}
	lagCtx, stopLag := context.WithCancel(ctx)
	lagDone := make(chan error, 1)
	go func() { lagDone <- lag.Run(lagCtx, 0) }()
	defer func() { stopLag(); <-lagDone }()
	return p.Run(ctx, cl)
}
