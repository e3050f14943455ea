// Package console is the `switchyard console` command: it connects to
// NATS (the snapshot audit stream) and Kafka (estimates, signals, routing
// events) and serves the web console of package console.
package console

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-llm/switchyard/console"
	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// Command returns `switchyard console`.
func Command() cli.Command {
	return cli.Command{Name: "console", Summary: "serve the web console: weights, history, profiles, explain, diff, rates, pipeline health", Run: runCommand}
}

func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	var conn cli.Connection
	conn.Register(fs)
	listen := fs.String("listen", "127.0.0.1:9190", "host:port of the console's HTTP server")
	bucket := fs.String("bucket", snapshots.DefaultBucket, "JetStream KV bucket of the snapshots")
	history := fs.Duration("history", time.Hour, "how far back the charts go")
	refresh := fs.Duration("refresh", 5*time.Second, "how often an open page reloads its data (0: never)")
	group := fs.String("processor-group", "switchyard-processor", "the processor's consumer group, whose lag the pipeline page shows")
	if err := cli.Parse(fs, args, nil); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	if conn.NATSURL == "" {
		return fmt.Errorf("%w: console: no NATS URL (the snapshots are in JetStream)", cli.ErrUsage)
	}
	if *refresh == 0 {
		*refresh = -1
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	nc, err := conn.ConnectNATS(nats.Name("switchyard-console"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("connecting to nats %s: %w", conn.NATSURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	store, err := openStore(ctx, js, *bucket, logger)
	if err != nil || store == nil {
		return err // nil: stopped before NATS was ready
	}
	cfg := console.Config{Snapshots: store, TopicPrefix: conn.TopicPrefix, ProcessorGroup: *group,
		History: *history, Refresh: *refresh, Logger: logger}
	if len(conn.Brokers()) > 0 {
		kc, err := conn.NewKafka(console.ClientOpts(cfg)...)
		if err != nil {
			return fmt.Errorf("creating kafka client: %w", err)
		}
		defer kc.Close()
		cfg.Kafka = kc
	} else {
		logger.Warn("no Kafka brokers: the console shows snapshots only (no profiles, rates or lag)")
	}
	c, err := console.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("%w: --listen: %w", cli.ErrUsage, err)
	}
	fmt.Fprintf(stdout, "console: http://%s/\n", ln.Addr())
	return c.Serve(ctx, ln)
}

// openStore opens the snapshot store, retrying every second while NATS
// is not ready; nil, nil when ctx ends first.
func openStore(ctx context.Context, js jetstream.JetStream, bucket string, log *slog.Logger) (*snapshots.Store, error) {
	for {
		openCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		store, err := snapshots.Lookup(openCtx, js, snapshots.Bucket(bucket)) // read-only: creates nothing
		cancel()
		if err == nil {
			return store, nil
		}
		log.Warn("snapshot store not ready", "err", err)
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
	}
}
