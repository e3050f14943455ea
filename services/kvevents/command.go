// Package kvevents is `switchyard kvevents`: it wires flags to the relay
// in github.com/switchyard-llm/switchyard/streams/kvevents.
package kvevents

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/brokerstate"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/kvevents"
)

// Command is `switchyard kvevents`.
func Command() cli.Command {
	return cli.Command{
		Name:    "kvevents",
		Summary: "relay engines' vLLM KV-cache events (ZMQ) to Kafka",
		Run:     run,
	}
}

func run(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvevents", flag.ContinueOnError)
	var conn cli.Connection
	conn.RegisterKafka(fs)
	conn.RegisterReplication(fs, false)
	list := fs.String("engines", "", `engines to follow, ","-separated: `+kvevents.EngineSyntax)
	var cfg kvevents.Config
	fs.IntVar(&cfg.MaxFrameBytes, "max-frame-bytes", 16<<20, "largest ZMQ frame (batch) taken from an engine; a larger one is dead-lettered")
	fs.DurationVar(&cfg.ReplayTimeout, "replay-timeout", 5*time.Second, "bound on one replay exchange with an engine")
	fs.IntVar(&cfg.MaxReplay, "max-replay", 4096, "most batches a gap is replayed for; a larger gap resyncs the engine at once")
	fs.DurationVar(&cfg.Reconnect, "reconnect", time.Second, "wait between connection attempts to an engine")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9108", "address of the /metrics endpoint (empty: off)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	engines, err := kvevents.ParseEngines(*list)
	if err != nil {
		return fmt.Errorf("%w: --engines: %v", cli.ErrUsage, err)
	}
	cfg.Engines = engines
	cfg.Topics = streams.TopicsFor(conn.TopicPrefix)
	repl, err := streams.NewReplication(conn.Replication.KafkaFactor, conn.Replication.KafkaMinInsync)
	if err != nil {
		return fmt.Errorf("%w: --kafka-replication-factor, --kafka-min-insync-replicas: %w", cli.ErrUsage, err)
	}
	cfg.Replication = repl
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	tel, err := obs.StartTelemetry(ctx, "kvevents", reg, nil) // OTLP export by the OTEL_* variables
	if err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	defer tel.Close(ctx, cfg.Logger)
	if len(conn.Brokers()) == 0 {
		return fmt.Errorf("%w: no kafka brokers", cli.ErrUsage)
	}
	cl, err := conn.NewKafka(kvevents.ClientOpts()...)
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	bs, err := brokerstate.New(cfg.Logger, reg) // WARN/INFO, switchyard_broker_connected, /ready
	if err != nil {
		return err
	}
	defer bs.Go(ctx, brokerstate.Kafka, brokerstate.PingKafka(cl))()
	r, err := kvevents.New(cl, cfg)
	if err != nil {
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	if *metricsListen != "" {
		_, stop, err := obs.ServeMetrics(ctx, *metricsListen, reg, bs)
		if err != nil {
			return err
		}
		defer stop()
	}
	return r.Run(ctx)
}
