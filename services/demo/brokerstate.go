package demo

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/switchyard-llm/switchyard/internal/brokerstate"
)

// watchBrokers tracks the embedded brokers as each service tracks its
// own (internal/brokerstate), through a Kafka client and a NATS
// connection of its own, under g until ctx is done:
// switchyard_broker_connected and switchyard_broker_outages_total on the
// demo's /metrics, each broker's state in its /health and /ready.
func watchBrokers(ctx context.Context, g *errgroup.Group, kafka []string, natsURL string, reg prometheus.Registerer, log *slog.Logger) (*brokerstate.Tracker, error) {
	bs, err := brokerstate.New(log.With("component", "demo"), reg)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka...))
	if err != nil {
		return nil, fmt.Errorf("broker state: kafka client: %w", err)
	}
	nc, err := nats.Connect(natsURL, nats.Timeout(natsConnectTimeout), nats.MaxReconnects(-1))
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("broker state: connecting to nats: %w", err)
	}
	g.Go(func() error {
		defer cl.Close()
		defer nc.Close()
		defer bs.Go(ctx, brokerstate.NATS, brokerstate.NATSConnected(nc))()
		bs.Watch(ctx, brokerstate.Kafka, brokerstate.PingKafka(cl))
		return nil
	})
	return bs, nil
}
