// Package agent is `switchyard agent`: it wires flags to the agent library
// (github.com/switchyard-llm/switchyard/agent).
package agent

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/agent"
	"github.com/switchyard-llm/switchyard/internal/brokerstate"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/streams"
)

// Command is `switchyard agent`.
func Command() cli.Command {
	return cli.Command{
		Name:    "agent",
		Summary: "scrape engines' /metrics and publish engine signals",
		Run:     run,
	}
}

// engineList is a repeatable flag of engine specs.
type engineList []string

func (l *engineList) String() string     { return strings.Join(*l, ";") }
func (l *engineList) Set(v string) error { *l = append(*l, v); return nil }

func run(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	var conn cli.Connection
	conn.RegisterKafka(fs)
	conn.RegisterReplication(fs, false)
	var engines engineList
	list := fs.String("engines", "", `engines to scrape, ";"-separated: `+agent.TargetSyntax)
	fs.Var(&engines, "engine", "one engine, "+agent.TargetSyntax+" (repeatable)")
	region := fs.String("region", "", "region of engines that do not name one")
	gpu := fs.String("gpu-class", "", "GPU class (h100, a100, l4, ...) of engines that do not name one")
	var cfg agent.Config
	fs.DurationVar(&cfg.Interval, "interval", 2*time.Second, "scrape interval")
	fs.DurationVar(&cfg.ErrorLogInterval, "error-log-interval", 30*time.Second, "least time between two log lines about one engine's failing scrapes")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9103", "address of the /metrics endpoint (empty: off)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	specs := append([]string(nil), engines...)
	for _, s := range strings.Split(*list, ";") {
		if s = strings.TrimSpace(s); s != "" {
			specs = append(specs, s)
		}
	}
	targets, err := agent.ParseTargets(specs, *region, *gpu)
	if err != nil {
		return fmt.Errorf("%w: %v", cli.ErrUsage, err)
	}
	cfg.Engines = targets
	cfg.TopicPrefix = conn.TopicPrefix
	repl, err := streams.NewReplication(conn.Replication.KafkaFactor, conn.Replication.KafkaMinInsync)
	if err != nil {
		return fmt.Errorf("%w: --kafka-replication-factor, --kafka-min-insync-replicas: %w", cli.ErrUsage, err)
	}
	cfg.Replication = repl
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	tel, err := obs.StartTelemetry(ctx, "agent", reg, nil) // OTLP export by the OTEL_* variables
	if err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	defer tel.Close(ctx, cfg.Logger)
	brokers := conn.Brokers()
	if len(brokers) == 0 {
		return fmt.Errorf("%w: no kafka brokers", cli.ErrUsage)
	}
	cl, err := conn.NewKafka(agent.ClientOpts()...)
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer cl.Close()
	bs, err := brokerstate.New(cfg.Logger, reg) // WARN/INFO, switchyard_broker_connected, /ready
	if err != nil {
		return err
	}
	defer bs.Go(ctx, brokerstate.Kafka, brokerstate.PingKafka(cl))()
	s, err := agent.New(cl, cfg)
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
	return s.Run(ctx)
}
