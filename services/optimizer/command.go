// Package optimizer is the `switchyard optimizer` command: it parses
// flags, builds the Kafka client and the snapshot store, and runs the
// control loop (streams/control; see docs/optimizer.md).
package optimizer

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/fleet"
	"github.com/switchyard-llm/switchyard/internal/brokerstate"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/obs"
	"github.com/switchyard-llm/switchyard/optimizer/plan"
	"github.com/switchyard-llm/switchyard/streams"
	"github.com/switchyard-llm/switchyard/streams/control"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// Command returns `switchyard optimizer`.
func Command() cli.Command {
	return cli.Command{Name: "optimizer", Summary: "consume estimates, solve, publish weight snapshots", Run: runCommand}
}

func runCommand(ctx context.Context, args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("optimizer", flag.ContinueOnError)
	var conn cli.Connection
	conn.Register(fs)
	conn.RegisterReplication(fs, true)
	var signing Signing
	signing.Register(fs)
	settle := fs.Duration("settle", 500*time.Millisecond, "plan a window once its estimates have been quiet this long")
	maxUtil := fs.Float64("max-utilization", 0.9, "cap on each engine's planned utilization, in (0,1]")
	churn := fs.Float64("churn-weight", plan.DefaultChurnWeight, "absolute churn: ms of cost per rps of traffic moved away from the previous weights; 0 = relative (--churn-relative), negative = no churn term")
	churnRel := fs.Float64("churn-relative", plan.DefaultChurnRelative, "relative churn (used when --churn-weight is 0): churn weight = this x the expected latency of the previous weights; negative = no churn term")
	ttl := fs.Duration("estimate-ttl", 30*time.Second, "ignore estimates older than this (in event time)")
	netTTL := fs.Duration("network-ttl", 2*time.Minute, "ignore measured network latencies older than this (static --region-rtt / --default-rtt-ms then apply)")
	probe := fs.Float64("probe-share", plan.DefaultProbeShare, "most of a cluster's traffic one probe floor takes (each healthy engine gets min(this, 1 rps) from its nearest cluster); negative = no probe floors")
	clusters := fs.String("clusters", "", "comma-separated clusters always planned for (so their gateways get a snapshot before traffic)")
	minDemand := fs.Float64("min-demand-rps", 1, "demand floor of every planned cluster")
	rtt := fs.String("region-rtt", "", "static network latency CLUSTER:REGION=MS,... used until measured")
	defRTT := fs.Float64("default-rtt-ms", 50, "network latency to another region when no entry exists")
	strict := fs.Bool("strict-residency", false, "a cluster may only use engines with a --region-rtt entry or a measured latency")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9102", "address of the /metrics endpoint (empty: off)")
	consoleListen := fs.String("console-listen", "", "also serve the web console, as switchyard console does, on this address (empty: off)")
	registry := fs.String("engine-registry", "", "engine registry file (YAML or JSON, docs/security.md#engine-registry): only its engines are planned, at its endpoints (empty: any engine the estimates name)")
	maxGain := fs.Float64("max-claim-gain", 0, "an engine estimate claiming more than this times its baseline capacity, or less than its baseline latency over it, is quarantined until gateways confirm it (0: 2 with --engine-registry, off without; negative: off)")
	compression := fs.String("snapshot-compression", snapshots.CompressionNone, "how snapshots are written under the cluster keys: none (the signed protobuf) or s2 (S2-compressed, about half the bytes to every gateway; gateways read both)")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	compress, err := snapshots.ParseCompression(*compression)
	if err != nil {
		return fmt.Errorf("%w: --snapshot-compression: %w", cli.ErrUsage, err)
	}
	storeOpts, err := signing.StoreOpts()
	if err != nil {
		return err
	}
	storeOpts = append(storeOpts, compress)
	matrix, err := ParseRTT(*rtt)
	if err != nil {
		return fmt.Errorf("%w: --region-rtt: %v", cli.ErrUsage, err)
	}
	var cl []string
	for _, c := range strings.Split(*clusters, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cl = append(cl, c)
		}
	}
	brokers := conn.Brokers()
	if len(brokers) == 0 {
		return fmt.Errorf("%w: optimizer: no Kafka brokers", cli.ErrUsage)
	}
	if conn.NATSURL == "" {
		return fmt.Errorf("%w: optimizer: no NATS URL", cli.ErrUsage)
	}
	repl, err := streams.NewReplication(conn.Replication.KafkaFactor, conn.Replication.KafkaMinInsync)
	if err != nil {
		return fmt.Errorf("%w: --kafka-replication-factor, --kafka-min-insync-replicas: %w", cli.ErrUsage, err)
	}
	var engines *fleet.Registry
	if *registry != "" {
		if engines, err = fleet.Load(*registry); err != nil {
			return fmt.Errorf("%w: --engine-registry: %w", cli.ErrUsage, err)
		}
	}
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	cfg := control.Config{
		TopicPrefix: conn.TopicPrefix, Replication: repl, Settle: *settle,
		Settings: plan.Settings{MaxUtilization: *maxUtil, ChurnWeight: *churn, ChurnRelative: *churnRel, EstimateTTL: *ttl,
			NetworkTTL: *netTTL, ProbeShare: *probe, Clusters: cl,
			MinDemandRPS: *minDemand, RegionRTTms: matrix, DefaultRTTms: *defRTT, StrictResidency: *strict},
		Registry: engines, MaxGain: *maxGain, Logger: logger, Registerer: reg,
	}
	tel, err := obs.StartTelemetry(ctx, "optimizer", reg, nil) // OTLP export by the OTEL_* variables
	if err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	defer tel.Close(ctx, logger)
	cfg.TracerProvider = tel.TracerProvider
	kc, err := conn.NewKafka(control.ClientOpts(cfg)...)
	if err != nil {
		return fmt.Errorf("creating kafka client: %w", err)
	}
	defer kc.Close()
	nc, err := conn.ConnectNATS(nats.Name("switchyard-optimizer"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("connecting to nats %s: %w", conn.NATSURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	bs, err := brokerstate.New(logger, reg) // WARN/INFO, switchyard_broker_connected, /ready
	if err != nil {
		return err
	}
	defer bs.Go(ctx, brokerstate.Kafka, brokerstate.PingKafka(kc))()
	defer bs.Go(ctx, brokerstate.NATS, brokerstate.NATSConnected(nc))()
	if *metricsListen != "" {
		_, stop, err := obs.ServeMetrics(ctx, *metricsListen, reg, bs)
		if err != nil {
			return err
		}
		defer stop()
	}
	store, ok := openStore(ctx, js, logger, append(storeOpts, snapshots.Replicas(conn.Replication.NATSReplicas))...)
	if !ok {
		return nil // stopped before NATS was ready
	}
	if *consoleListen != "" {
		stopConsole, err := serveConsole(ctx, *consoleListen, conn, store, logger)
		if err != nil {
			return err
		}
		defer stopConsole()
	}
	opt, err := control.New(kc, store, cfg)
	if err != nil {
		return err
	}
	return opt.Run(ctx)
}

// openStore opens the snapshot store, retrying every second while NATS
// is not ready; false when ctx ends first.
func openStore(ctx context.Context, js jetstream.JetStream, log *slog.Logger, opts ...snapshots.Opt) (*snapshots.Store, bool) {
	for {
		openCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		store, err := snapshots.Open(openCtx, js, opts...)
		cancel()
		if err == nil {
			return store, true
		}
		log.Warn("snapshot store not ready", "err", err)
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false
		case <-t.C:
		}
	}
}

// ParseRTT parses "a:b=40,b:a=40" (cluster:region=ms) into a matrix.
func ParseRTT(s string) (map[string]map[string]float64, error) {
	out := map[string]map[string]float64{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		pair, ms, ok := strings.Cut(part, "=")
		from, to, ok2 := strings.Cut(pair, ":")
		if !ok || !ok2 || from == "" || to == "" {
			return nil, fmt.Errorf("rtt entry %q: want CLUSTER:REGION=MS", part)
		}
		v, err := strconv.ParseFloat(ms, 64)
		if err != nil || v < 0 || v != v || v > 1e9 {
			return nil, fmt.Errorf("rtt entry %q: bad milliseconds", part)
		}
		if out[from] == nil {
			out[from] = map[string]float64{}
		}
		out[from][to] = v
	}
	return out, nil
}
