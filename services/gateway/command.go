// Package gateway is the `switchyard gateway` command: it parses flags into
// a gateway.Config and runs the data plane (package gateway).
package gateway

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/switchyard-llm/switchyard/gateway"
	"github.com/switchyard-llm/switchyard/internal/cli"
)

// Command returns `switchyard gateway`.
func Command() cli.Command {
	return cli.Command{
		Name:    "gateway",
		Summary: "route and proxy OpenAI-compatible requests on the published weights",
		Run:     run,
	}
}

// Config, New and the Gateway type are the library's; re-exported so the
// demo can run gateways in-process from either package.
type (
	Config  = gateway.Config
	Gateway = gateway.Gateway
)

// New builds a gateway (see gateway.New).
func New(cfg Config) (*Gateway, error) { return gateway.New(cfg) }

// ParseFlags parses args into a Config (Logger, Registerer and Gatherer
// left unset).
func ParseFlags(args []string, getenv func(string) string) (Config, string, error) {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	var cfg Config
	var conn cli.Connection
	var engines, models, logLevel string
	fs.StringVar(&cfg.Cluster, "cluster", "", "CPU cluster (region) whose snapshot this gateway routes on (required)")
	fs.StringVar(&cfg.Listen, "listen", gateway.DefaultListen, "HTTP listen address (OpenAI API, /health, /metrics)")
	fs.StringVar(&cfg.SnapshotFile, "snapshot-file", "", "WeightSnapshot in protobuf JSON applied at start (routes with no control plane)")
	fs.StringVar(&cfg.SnapshotBucket, "snapshot-bucket", "", "JetStream KV bucket of snapshots (default switchyard_snapshots)")
	fs.StringVar(&engines, "engines", "", "static engines id=url,... routed to (fewest in flight) until a snapshot arrives")
	fs.StringVar(&models, "models", "", "comma-separated accepted model names (empty: any)")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", gateway.DefaultMaxBodyBytes, "request body limit (413 above)")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", gateway.DefaultConnectTimeout, "engine connect timeout")
	fs.DurationVar(&cfg.FirstTokenTimeout, "first-token-timeout", gateway.DefaultFirstTokenTimeout, "wait for the first byte of the engine's response body")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", gateway.DefaultIdleTimeout, "longest gap between SSE events")
	fs.IntVar(&cfg.MaxInFlightPerEngine, "max-in-flight-per-engine", 0, "hard in-flight cap per engine; 429 when all are full (0: none)")
	fs.DurationVar(&cfg.HealthInterval, "health-interval", gateway.DefaultHealthInterval, "active /health check interval (negative: off)")
	fs.Float64Var(&cfg.RetryBudget.Ratio, "retry-ratio", 0.1, "retries allowed per request over the budget window")
	fs.IntVar(&cfg.RetryBudget.Floor, "retry-floor", 10, "retries always allowed per budget window")
	fs.IntVar(&cfg.EventBuffer, "event-buffer", gateway.DefaultEventBuffer, "routing events buffered for Kafka before dropping")
	fs.StringVar(&cfg.HTTPServer, "http-server", gateway.ServerFast, "server for the proxy routes: fast (own HTTP/1.1 loop, net/http for the rest) or std (net/http)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	conn.Register(fs)
	if err := cli.Parse(fs, args, getenv); err != nil {
		return cfg, "", err
	}
	if fs.NArg() > 0 {
		return cfg, "", fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	if cfg.Cluster == "" {
		return cfg, "", fmt.Errorf("%w: --cluster is required", cli.ErrUsage)
	}
	if cfg.HTTPServer != gateway.ServerFast && cfg.HTTPServer != gateway.ServerStd {
		return cfg, "", fmt.Errorf("%w: --http-server %q: want fast or std", cli.ErrUsage, cfg.HTTPServer)
	}
	var err error
	if cfg.Engines, err = gateway.ParseEngines(engines); err != nil {
		return cfg, "", fmt.Errorf("%w: --engines: %w", cli.ErrUsage, err)
	}
	for _, m := range strings.Split(models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Models = append(cfg.Models, m)
		}
	}
	cfg.NATSURL = conn.NATSURL
	cfg.KafkaBrokers = conn.Brokers()
	cfg.TopicPrefix = conn.TopicPrefix
	return cfg, logLevel, nil
}

func run(ctx context.Context, args []string, _, stderr io.Writer) error {
	cfg, level, err := ParseFlags(args, nil)
	if err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("%w: --log-level: %w", cli.ErrUsage, err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Registerer, cfg.Gatherer = reg, reg
	g, err := gateway.New(cfg)
	if err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	return g.Run(ctx)
}
