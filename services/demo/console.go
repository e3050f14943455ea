package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/console"
	"github.com/switchyard-llm/switchyard/streams/snapshots"
)

// startConsole serves the web console (package console) on listen under
// g, on its own NATS connection and Kafka client, closed when it stops.
// It returns the address it listens on.
func startConsole(ctx context.Context, g *errgroup.Group, listen string, kafka []string, natsURL string, log *slog.Logger) (string, error) {
	nc, err := nats.Connect(natsURL, nats.Name("switchyard-console"), nats.Timeout(natsConnectTimeout))
	if err != nil {
		return "", fmt.Errorf("console: connecting to nats %s: %w", natsURL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return "", fmt.Errorf("console: jetstream: %w", err)
	}
	store, err := snapshots.Open(ctx, js)
	if err != nil {
		nc.Close()
		return "", fmt.Errorf("console: %w", err)
	}
	cfg := console.Config{Snapshots: store, Logger: log.With("component", "console")}
	kc, err := kgo.NewClient(append(console.ClientOpts(cfg), kgo.SeedBrokers(kafka...))...)
	if err != nil {
		nc.Close()
		return "", fmt.Errorf("console: creating kafka client: %w", err)
	}
	cfg.Kafka = kc
	c, err := console.New(cfg)
	if err == nil {
		var ln net.Listener
		if ln, err = net.Listen("tcp", listen); err == nil {
			g.Go(func() error {
				defer nc.Close()
				defer kc.Close()
				return c.Serve(ctx, ln)
			})
			return ln.Addr().String(), nil
		}
		err = fmt.Errorf("console listener %s: %w", listen, err)
	}
	kc.Close()
	nc.Close()
	return "", err
}
