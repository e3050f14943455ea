// Package console is the `switchyard console` command: it connects to
// NATS (the snapshot audit stream) and Kafka (estimates, signals, routing
// events) and serves the web console of package console.
package console

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/console"
	"github.com/switchyard-llm/switchyard/internal/brokerstate"
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
	bs, err := brokerstate.New(logger, prometheus.NewRegistry()) // the WARN/INFO of NATS and Kafka outages
	if err != nil {
		return err
	}
	defer bs.Go(ctx, brokerstate.NATS, brokerstate.NATSConnected(nc))()
	// The port opens at once; until the snapshot store opens, the pages
	// that read it say NATS is unavailable, and why.
	store := &pendingStore{health: bs}
	cfg := console.Config{Snapshots: store, TopicPrefix: conn.TopicPrefix, ProcessorGroup: *group,
		History: *history, Refresh: *refresh, Logger: logger}
	if len(conn.Brokers()) > 0 {
		kc, err := conn.NewKafka(console.ClientOpts(cfg)...)
		if err != nil {
			return fmt.Errorf("creating kafka client: %w", err)
		}
		defer kc.Close()
		cfg.Kafka = kc
		defer bs.Go(ctx, brokerstate.Kafka, brokerstate.PingKafka(kc))()
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
	openCtx, stopOpen := context.WithCancel(ctx)
	opened := make(chan struct{})
	go func() {
		defer close(opened)
		if s, _ := openStore(openCtx, js, *bucket, logger); s != nil {
			store.set(s)
		}
	}()
	defer func() { stopOpen(); <-opened }()
	return c.Serve(ctx, ln)
}

// ErrStoreNotOpen is what the pages show until the snapshot store opens.
var ErrStoreNotOpen = errors.New("NATS unavailable: the snapshot store is not open yet")

// pendingStore is the console's Snapshots until the store opens.
type pendingStore struct {
	health interface{ Health() (bool, string) }
	store  atomic.Pointer[snapshots.Store]
}

var _ console.Snapshots = (*pendingStore)(nil)

func (p *pendingStore) set(s *snapshots.Store) { p.store.Store(s) }

// ReadAudit reads the store, or returns ErrStoreNotOpen with the brokers'
// state while it is not open.
func (p *pendingStore) ReadAudit(ctx context.Context, from snapshots.AuditFrom, fn func(snapshots.AuditEntry) bool) error {
	if s := p.store.Load(); s != nil {
		return s.ReadAudit(ctx, from, fn)
	}
	_, detail := p.health.Health()
	return fmt.Errorf("%w (%s)", ErrStoreNotOpen, strings.TrimSpace(strings.ReplaceAll(detail, "\n", "; ")))
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
